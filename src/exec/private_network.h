// A sandboxed job's own network (`network: true`, the default): the
// network namespace bubblewrap made for it, connected to the outside by
// pasta (Debian's `passt` package), a user-mode network that turns the
// job's TCP, UDP and ICMP into sockets of this machine's.
//
// What the job gets: one interface (named like the machine's, with its
// address and gateway, as pasta copies them), outbound connections to
// anywhere this machine reaches, and nothing of the machine itself:
//   - pasta runs with --no-map-gw (the gateway address is not the host's
//     loopback) and forwards no port from the namespace to the host
//     (-T none -U none), so 127.0.0.1 in the job is its own loopback;
//   - a "prohibit" route in the namespace for each of the machine's own
//     addresses (every interface's, as getifaddrs lists them when the job
//     starts) and for each `blocked` prefix (link-local and cloud metadata
//     by default): connecting there fails at once with EACCES;
//   - no port of the host reaches the job (-t none -u none), except, for
//     a rank of a multi-node job, its block of `forward` ports: those are
//     bound on the host by a forwarder of ours (exec/port_forwarder.h,
//     which says why not pasta's) and relayed to the job, and the
//     namespace's ephemeral range (ip_local_port_range) is that block less
//     its first port, so every socket the job binds to port 0 (gloo's,
//     NCCL's) can be reached from the other ranks; the first port is the
//     master's (MASTER_PORT) for rank 0.
// The job cannot change any of it: the namespace belongs to bubblewrap's
// first user namespace, where the job holds no capability.
//
// pasta runs as the task's account (pasta needs no privilege: it joins the
// user namespace that owns the job's network, which that account owns), in
// the job's cgroup, with PR_SET_PDEATHSIG so that it dies with the shim, and
// is killed when the job ends. A root agent gives it a private mount
// namespace with its own /dev/net/tun node (mode 0666, as Debian ships
// it), so that it works where the host's node is root-only.
//
// Used from the shim's one thread; Attach forks (no thread), because the
// helper that configures the namespace must enter a user namespace.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::exec {

// An IPv4 or IPv6 prefix ("169.254.0.0/16", "fd00:ec2::254/128"; an
// address alone is a /32 or /128).
struct IpPrefix {
  int family = 0;  // AF_INET or AF_INET6
  std::array<unsigned char, 16> addr{};
  int length = 0;
  friend bool operator==(const IpPrefix&, const IpPrefix&) = default;
};
Result<IpPrefix> ParseIpPrefix(std::string_view text);
std::string FormatIpPrefix(const IpPrefix& p);

// The machine's own addresses, every interface's except loopback ones, as
// host prefixes (/32, /128), from the calling process's network namespace.
std::vector<IpPrefix> HostAddresses();

// Ports of this machine: [first, first + count).
struct PortRange {
  int first = 0;
  int count = 0;
  bool empty() const { return count <= 0; }
  int last() const { return first + count - 1; }
  friend bool operator==(const PortRange&, const PortRange&) = default;
};

struct PrivateNetworkPlan {
  std::string pasta = "pasta";    // the program: a path, or a name on PATH
  std::vector<IpPrefix> blocked;  // prohibit routes (the host's addresses are added)
  PortRange forward;              // a gang rank's ports (see above); empty: none
  int uid = -1;                   // pasta's account (the task's); -1: ours
  int gid = -1;
  std::string cgroup_procs;  // pasta joins this cgroup ("": none)
  std::string log_path;      // pasta's own messages (appended)
  // For bubblewrap to bring the loopback up, then for pasta to configure
  // the namespace (each).
  int64_t timeout_ms = 20'000;
};

// What the machine's routing says about the default routes a copy of it
// (pasta's) will have.
struct DefaultRoutes {
  bool v4 = false;
  bool v6 = false;
  bool any() const { return v4 || v6; }
};
DefaultRoutes HostDefaultRoutes();

// The interface of the machine's IPv4 default route (else its IPv6 one),
// which pasta copies into the job's namespace under the same name; "" when
// there is none.
std::string DefaultRouteInterface();

class PrivateNetwork {
 public:
  PrivateNetwork() = default;
  PrivateNetwork(PrivateNetwork&& other) noexcept;
  PrivateNetwork& operator=(PrivateNetwork&& other) noexcept;
  PrivateNetwork(const PrivateNetwork&) = delete;
  PrivateNetwork& operator=(const PrivateNetwork&) = delete;
  ~PrivateNetwork();

  // Connects the network namespace `netns_fd` (bubblewrap's, before the job
  // runs) as described above and returns once the job may start: pasta
  // configured the interface and the routes are in. An error (pasta
  // missing, pasta exited, the namespace not configured in time) says
  // why, with pasta's last message; nothing is left running then.
  //
  // pasta starts only once the namespace's loopback is up. bubblewrap's
  // child (`sandbox`, the process whose namespace it is) gives lo its
  // address and brings it up itself, and may do that after bubblewrap
  // reported its pid; pasta brings lo up first thing, and the kernel then
  // gives lo 127.0.0.1, so a pasta that came first would make bubblewrap's
  // own RTM_NEWADDR fail (EEXIST) and the sandbox with it ("loopback:
  // Failed RTM_NEWADDR"). Aborted: `sandbox` ended before its loopback
  // was up (bubblewrap failed; its own message says why).
  static Result<PrivateNetwork> Attach(int netns_fd, pid_t sandbox, const PrivateNetworkPlan& plan);

  // pasta, and the port forwarder of a gang rank: processes of the
  // shim's that are not the job's.
  std::vector<pid_t> helper_pids() const;
  // Kills them (through pidfds: never another process) and reaps them if
  // they were not reaped yet.
  void Stop();

 private:
  struct Helper {
    pid_t pid = -1;
    int pidfd = -1;
  };
  Status Connect(const std::string& pasta, int netns_fd, int userns_fd, int log_fd,
                 const PrivateNetworkPlan& plan);
  void Adopt(pid_t pid);
  std::vector<Helper> helpers_;
};

}  // namespace gpupool::exec
