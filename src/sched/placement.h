// Placement on the fractional GPU model: the resource arithmetic every
// placement policy shares.
//
// Contract: pure value types and free functions. No I/O, no clock, no globals,
// no threads; every function is safe to call from any thread on values the
// caller owns. Amounts are integers: milli-CPU, MiB, and milli-GPU per GPU
// (1000 = one whole GPU). A node's `gpus` list holds the FREE milli of each of
// its GPUs. A task either takes part of one GPU (num_gpu == 1, gpu_milli <
// 1000), or num_gpu whole, fully free GPUs (gpu_milli == 1000), or no GPU
// (num_gpu == 0). Allocate() never over-commits: it applies only a placement
// that Fits() (checked), and Release() is its exact inverse.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpupool::sched {

inline constexpr int64_t kMilliPerGpu = 1000;

// A node's resources: its capacity, or what is free on it, depending on use.
struct NodeCapacity {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::string model;      // GPU model, e.g. "V100M16"; empty for a CPU-only node
  std::vector<int> gpus;  // free milli per GPU; 1000 = a whole free GPU
};

struct TaskRequest {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int num_gpu = 0;
  int gpu_milli = 0;                    // per GPU: < 1000 is a share of one GPU (num_gpu == 1)
  std::vector<std::string> gpu_models;  // allowed models; empty = any

  bool IsFractional() const { return num_gpu == 1 && gpu_milli < kMilliPerGpu; }
  // Total GPU milli the task asks for (num_gpu * gpu_milli).
  int64_t GpuDemand() const { return int64_t{num_gpu} * gpu_milli; }
};

// A placement on one node: which GPUs it uses (empty for a CPU-only task).
struct Choice {
  int node = -1;
  std::vector<int> gpus;
};

// The cluster a policy looks at: capacity and free resources per node, index
// aligned. Invariant: free[i] never exceeds capacity[i] in any dimension.
struct ClusterState {
  std::vector<NodeCapacity> capacity;
  std::vector<NodeCapacity> free;

  static ClusterState FromCapacity(std::vector<NodeCapacity> nodes);
  int64_t TotalGpuMilli() const;
  int64_t FreeGpuMilli() const;
};

// True when the node's model is allowed by the task (an empty list allows any;
// a GPU task never goes to a node without GPUs of an allowed model).
bool ModelAllowed(const NodeCapacity& node, const TaskRequest& task);

// True when the task fits on the node's free resources: CPU, memory, model,
// and GPUs (one GPU with >= gpu_milli free for a share; num_gpu fully free
// GPUs otherwise).
bool Fits(const NodeCapacity& free, const TaskRequest& task);

// GPUs on the node that could host the task's share (fractional tasks only):
// indices of GPUs with at least gpu_milli free, in index order.
std::vector<int> ShareCandidates(const NodeCapacity& free, const TaskRequest& task);

// The first num_gpu fully free GPUs, in index order (whole-GPU tasks), or
// nothing if there are not enough.
std::optional<std::vector<int>> WholeGpus(const NodeCapacity& free, const TaskRequest& task);

// True when `gpus` is a valid GPU choice for the task on this node and the
// CPU and memory fit.
bool ValidChoice(const NodeCapacity& free, const TaskRequest& task, const std::vector<int>& gpus);

// Subtracts the task from the node. Returns false (and changes nothing) when
// the choice is not valid.
bool Allocate(NodeCapacity& free, const TaskRequest& task, const std::vector<int>& gpus);

// Adds the task back (the inverse of a successful Allocate).
void Release(NodeCapacity& free, const TaskRequest& task, const std::vector<int>& gpus);

// Sum of free GPU milli on the node.
int64_t FreeGpuMilli(const NodeCapacity& node);

}  // namespace gpupool::sched
