// A provider node as the server records it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "model/resources.h"

namespace gpupool {

// ready: connected and accepting work; offline: not connected but within the
// grace period (its attempts are kept); lost: gone past the grace period
// (its attempts were requeued).
enum class NodeState { kReady, kOffline, kLost };
std::string_view NodeStateName(NodeState s);
Result<NodeState> ParseNodeState(std::string_view name);

// Labels an agent sets itself, describing how it runs jobs (a provider's
// own --label may not start with "gpupool/"):
//   gpupool/executor.<name>: "true"   each executor it offers and that works
//   gpupool/images: "true"            its sandbox runs images (skopeo, umoci)
// The server turns a job's `executor` and `image` into these requirements
// (an image job that names no executor, or the sandbox, needs
// gpupool/images; docker and podman pull docker:// images themselves).
inline constexpr std::string_view kReservedLabelPrefix = "gpupool/";
inline constexpr const char* kImagesLabel = "gpupool/images";
inline std::string ExecutorLabel(std::string_view executor) {
  return "gpupool/executor." + std::string(executor);
}

struct Node {
  std::string id;    // "n-3f9a0c1b2d4e", assigned by the server at first registration
  std::string name;  // unique, chosen by the provider (--name)
  NodeState state = NodeState::kOffline;
  std::vector<GpuInfo> gpus;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::string driver_version;  // empty when unknown
  std::string cuda_version;    // e.g. "12.4"
  std::string agent_version;
  std::map<std::string, std::string> labels;
  std::string owner_group;  // the group (lab) that owns the machine; empty = none
  int64_t registered_ms = 0;
  int64_t last_seen_ms = 0;

  friend bool operator==(const Node&, const Node&) = default;
};

}  // namespace gpupool
