#include "server/node_liveness.h"

#include <algorithm>

namespace gpupool::server {

int64_t LeaseMarginMs(int64_t lease_ms) { return std::max<int64_t>(2000, lease_ms / 10); }

NodeLiveness::NodeLiveness(const Clock& clock, LivenessOptions options)
    : clock_(clock), options_(options), started_ms_(clock.MonoMs()) {}

NodeLiveness::Entry NodeLiveness::EntryOf(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  if (it != nodes_.end()) return it->second;
  // Unknown to this process: as if heard from and disconnected at its start.
  return Entry{started_ms_, started_ms_, false};
}

void NodeLiveness::LeaseRequested(const std::string& node_id) {
  Entry e = EntryOf(node_id);
  e.lease_heard_ms = std::max(e.lease_heard_ms, clock_.MonoMs());
  nodes_[node_id] = e;
}

void NodeLiveness::Connected(const std::string& node_id) {
  Entry e = EntryOf(node_id);
  e.connected = true;
  nodes_[node_id] = e;
}

void NodeLiveness::Disconnected(const std::string& node_id) {
  Entry e = EntryOf(node_id);
  if (e.connected || nodes_.count(node_id) == 0) e.offline_since_ms = clock_.MonoMs();
  e.connected = false;
  nodes_[node_id] = e;
}

int64_t NodeLiveness::LeasesExpireAt(const std::string& node_id) const {
  const int64_t lease = options_.attempt_lease_ms;
  if (lease <= 0) return EntryOf(node_id).lease_heard_ms;
  return EntryOf(node_id).lease_heard_ms + lease + LeaseMarginMs(lease);
}

bool NodeLiveness::LeasesExpired(const std::string& node_id) const {
  if (EntryOf(node_id).connected) return false;
  return clock_.MonoMs() >= LeasesExpireAt(node_id);
}

bool NodeLiveness::LostNow(const std::string& node_id) const {
  Entry e = EntryOf(node_id);
  if (e.connected) return false;
  if (clock_.MonoMs() - e.offline_since_ms < options_.node_lost_after_ms) return false;
  return LeasesExpired(node_id);
}

}  // namespace gpupool::server
