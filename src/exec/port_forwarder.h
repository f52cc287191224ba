// The ports of a multi-node job's rank (exec/private_network.h): a process
// that listens on a block of this machine's TCP ports, on every address,
// and relays each connection into the job's network namespace, to the same
// address and port there (the namespace carries the machine's address).
//
// Why not pasta's own port forwarding (-t): Debian 12's pasta completes the
// handshake of a forwarded connection with the job only once; when the
// job's listening socket has a full accept queue (gloo listens with a
// backlog of 1) the kernel drops that ACK and the connection hangs
// half-open, where a TCP client would have retransmitted. Here the
// connection inside the namespace is an ordinary kernel socket.
//
// The forwarder binds its listening sockets in the machine's namespace,
// then becomes the task's account and enters the job's user and network
// namespaces: each connection it makes is a socket of the job's network,
// made with no privilege over anything else. It joins the job's cgroup and
// dies with the shim (PR_SET_PDEATHSIG). A connection to a port nothing
// listens on inside is closed (the peer sees a reset), as pasta would.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"
#include "exec/private_network.h"

namespace gpupool::exec {

struct PortForwarderPlan {
  PortRange ports;
  int userns_fd = -1;  // the user namespace that owns the job's network
  int netns_fd = -1;   // the job's network namespace
  int uid = -1;        // the task's account; -1: ours
  int gid = -1;
  std::string cgroup_procs;  // "" = none
};

// Forks the forwarder and returns its pid once every port is bound and it
// is in the job's namespaces. An error ("port 61003 of this rank's block is
// in use on this machine") leaves nothing running. The caller reaps it.
Result<pid_t> StartPortForwarder(const PortForwarderPlan& plan);

}  // namespace gpupool::exec
