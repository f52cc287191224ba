// NodeLiveness: when the server may give a node's work to another node.
//
// Every attempt holds a lease (docs/architecture.md, "Attempt leases"). The
// agent asks the server to renew it: a `lease` message it stamps with its
// own monotonic time t0, or its `hello`; the server answers at once, and the
// agent then moves its tasks' deadlines to t0 + lease. The shim of each task
// kills the job by that deadline on its own, even when the agent is hung.
// Since the server received the request after the agent sent it, the
// agent's deadline falls no later than (server's receive time + lease), as
// long as both machines' clocks run at about the same rate. So the server,
// which records when it last heard a renewal request from each node, knows
// every attempt on a silent node has stopped once lease + margin has passed
// since then: only then may its work start elsewhere.
//
// A node whose agent disconnected is also given `node_lost_after_ms` to
// come back before it is declared lost, as before leases. Every time here
// is the injected Clock's MonoMs, so a stepped wall clock changes nothing.
// What this process has not heard about counts as heard when it started: a
// restarted server waits a whole lease for every node.
//
// Pure bookkeeping, in memory; single-threaded (the server's event loop).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/clock.h"

namespace gpupool::server {

struct LivenessOptions {
  // How long each lease renewal lasts (--attempt-lease); 0 = no leases
  // (attempts on a silent node may still be running when it is lost).
  int64_t attempt_lease_ms = 30'000;
  // A disconnected node is lost after this long (--node-lost-after-ms).
  int64_t node_lost_after_ms = 40'000;
};

// What the server waits past a lease: a tenth of it, at least 2 s. Covers
// the shim's last SIGKILL and reap and a difference of clock rates between
// the machines far larger than any real one.
int64_t LeaseMarginMs(int64_t lease_ms);

class NodeLiveness {
 public:
  NodeLiveness(const Clock& clock, LivenessOptions options);

  const LivenessOptions& options() const { return options_; }

  // The node asked for a lease renewal (its hello, or a lease message) now.
  void LeaseRequested(const std::string& node_id);
  // The node's agent disconnected now (or the server let it go: a revoked
  // credential). A node is offline until it says hello again.
  void Disconnected(const std::string& node_id);
  // The node's agent said hello now: it is connected.
  void Connected(const std::string& node_id);

  // Every lease the node's agent may still hold has expired (by the
  // margin): no attempt of it runs, so its work may start elsewhere.
  bool LeasesExpired(const std::string& node_id) const;
  // The node is offline and has been long enough to be declared lost, and
  // its leases have expired.
  bool LostNow(const std::string& node_id) const;
  // MonoMs after which LeasesExpired holds (for logs and tests).
  int64_t LeasesExpireAt(const std::string& node_id) const;

 private:
  struct Entry {
    int64_t lease_heard_ms = 0;  // MonoMs of the last renewal request
    int64_t offline_since_ms = 0;
    bool connected = false;
  };
  Entry EntryOf(const std::string& node_id) const;

  const Clock& clock_;
  LivenessOptions options_;
  int64_t started_ms_;  // MonoMs when this process began tracking
  std::map<std::string, Entry> nodes_;
};

}  // namespace gpupool::server
