// MemoryStore's nodes facet (store/memory_tables.h): nodes, node events,
// agent credentials and the outbox.
#include <limits>

#include "store/memory_tables.h"

namespace gpupool {

// ---- nodes

Status MemoryTx::PutNode(const Node& n) {
  auto taken = s_.node_by_name.find(n.name);
  if (taken != s_.node_by_name.end() && taken->second != n.id) {
    return Status::AlreadyExists("node name \"" + n.name + "\" is already used by another node");
  }
  auto it = s_.nodes.find(n.id);
  if (it != s_.nodes.end() && it->second.name != n.name) j_.Erase(s_.node_by_name, it->second.name);
  j_.Put(s_.node_by_name, n.name, n.id);
  j_.Put(s_.nodes, n.id, n);
  return Status::Ok();
}

Result<std::optional<Node>> MemoryTx::GetNode(const std::string& id) {
  auto it = s_.nodes.find(id);
  if (it == s_.nodes.end()) return std::optional<Node>();
  return std::optional<Node>(it->second);
}

Result<std::optional<Node>> MemoryTx::GetNodeByName(const std::string& name) {
  auto it = s_.node_by_name.find(name);
  if (it == s_.node_by_name.end()) return std::optional<Node>();
  return GetNode(it->second);
}

Result<std::vector<Node>> MemoryTx::ListNodes() {
  std::vector<Node> out;
  out.reserve(s_.nodes.size());
  for (const auto& [name, id] : s_.node_by_name) out.push_back(s_.nodes.at(id));
  return out;
}

// ---- node events

Result<int64_t> MemoryTx::AppendNodeEvent(const NodeEvent& event) {
  NodeEvent e = event;
  e.id = s_.last_node_event + 1;
  j_.Set(s_.last_node_event, e.id);
  j_.Insert(s_.node_events_by_node, std::pair(e.node_id, e.id));
  j_.Put(s_.node_events, e.id, e);
  return e.id;
}

Result<std::vector<NodeEvent>> MemoryTx::ListNodeEvents(const std::string& node_id,
                                                        int64_t after_id, int64_t before_id,
                                                        int32_t limit) {
  std::vector<NodeEvent> out;
  if (limit <= 0) return out;
  const auto max = static_cast<size_t>(limit);
  if (before_id > 0) {  // newest first: walk down from before_id
    for (auto it = s_.node_events.lower_bound(before_id); it != s_.node_events.begin();) {
      --it;
      if (it->first <= after_id || out.size() >= max) break;
      if (node_id.empty() || it->second.node_id == node_id) out.push_back(it->second);
    }
    return out;
  }
  if (node_id.empty()) {
    for (auto it = s_.node_events.upper_bound(after_id);
         it != s_.node_events.end() && out.size() < max; ++it) {
      out.push_back(it->second);
    }
    return out;
  }
  for (auto it = s_.node_events_by_node.upper_bound(std::pair(node_id, after_id));
       it != s_.node_events_by_node.end() && it->first == node_id && out.size() < max; ++it) {
    out.push_back(s_.node_events.at(it->second));
  }
  return out;
}

// ---- agent credentials

Status MemoryTx::PutAgentCredential(const AgentCredential& c) {
  j_.Put(s_.credentials, c.node_name, c);
  return Status::Ok();
}

Result<std::optional<AgentCredential>> MemoryTx::GetAgentCredential(const std::string& node) {
  auto it = s_.credentials.find(node);
  if (it == s_.credentials.end()) return std::optional<AgentCredential>();
  return std::optional<AgentCredential>(it->second);
}

Result<std::vector<AgentCredential>> MemoryTx::ListAgentCredentials() {
  std::vector<AgentCredential> out;
  for (const auto& [name, c] : s_.credentials) out.push_back(c);
  return out;
}

// ---- outbox

Result<int64_t> MemoryTx::PushOutbox(const std::string& node_id, const std::string& type,
                                     const std::string& body) {
  auto it = s_.outbox_seq.find(node_id);
  const int64_t seq = (it == s_.outbox_seq.end() ? 0 : it->second) + 1;
  j_.Put(s_.outbox_seq, node_id, seq);
  j_.Put(s_.outbox, std::pair(node_id, seq), OutboxMessage{node_id, seq, type, body});
  return seq;
}

Result<std::vector<OutboxMessage>> MemoryTx::ListOutbox(const std::string& node_id,
                                                        int64_t after_seq) {
  std::vector<OutboxMessage> out;
  for (auto it = s_.outbox.upper_bound(std::pair(node_id, after_seq));
       it != s_.outbox.end() && it->first.first == node_id; ++it) {
    out.push_back(it->second);
  }
  return out;
}

Status MemoryTx::AckOutbox(const std::string& node_id, int64_t upto_seq) {
  auto it = s_.outbox.lower_bound(std::pair(node_id, std::numeric_limits<int64_t>::min()));
  while (it != s_.outbox.end() && it->first.first == node_id && it->first.second <= upto_seq) {
    auto key = it->first;
    ++it;
    j_.Erase(s_.outbox, key);
  }
  return Status::Ok();
}

}  // namespace gpupool
