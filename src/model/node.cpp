#include "model/node.h"

namespace gpupool {

std::string_view NodeStateName(NodeState s) {
  switch (s) {
    case NodeState::kReady:
      return "ready";
    case NodeState::kOffline:
      return "offline";
    case NodeState::kLost:
      return "lost";
  }
  return "unknown";
}

Result<NodeState> ParseNodeState(std::string_view name) {
  if (name == "ready") return NodeState::kReady;
  if (name == "offline") return NodeState::kOffline;
  if (name == "lost") return NodeState::kLost;
  return Status::InvalidArgument("unknown node state \"" + std::string(name) + "\"");
}

}  // namespace gpupool
