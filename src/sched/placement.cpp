#include "sched/placement.h"

#include <algorithm>

namespace gpupool::sched {

ClusterState ClusterState::FromCapacity(std::vector<NodeCapacity> nodes) {
  ClusterState s;
  s.free = nodes;
  s.capacity = std::move(nodes);
  return s;
}

int64_t ClusterState::TotalGpuMilli() const {
  int64_t t = 0;
  for (const auto& n : capacity) t += sched::FreeGpuMilli(n);
  return t;
}

int64_t ClusterState::FreeGpuMilli() const {
  int64_t t = 0;
  for (const auto& n : free) t += sched::FreeGpuMilli(n);
  return t;
}

int64_t FreeGpuMilli(const NodeCapacity& node) {
  int64_t t = 0;
  for (int g : node.gpus) t += g;
  return t;
}

bool ModelAllowed(const NodeCapacity& node, const TaskRequest& task) {
  if (task.gpu_models.empty()) return true;
  if (node.model.empty()) return false;
  return std::find(task.gpu_models.begin(), task.gpu_models.end(), node.model) !=
         task.gpu_models.end();
}

namespace {

bool HostFits(const NodeCapacity& free, const TaskRequest& task) {
  return free.cpu_milli >= task.cpu_milli && free.memory_mib >= task.memory_mib &&
         ModelAllowed(free, task);
}

}  // namespace

bool Fits(const NodeCapacity& free, const TaskRequest& task) {
  if (!HostFits(free, task)) return false;
  if (task.num_gpu <= 0) return true;
  int need = task.num_gpu;
  const int per = task.IsFractional() ? task.gpu_milli : static_cast<int>(kMilliPerGpu);
  for (int g : free.gpus) {
    if (g >= per && --need == 0) return true;
  }
  return false;
}

std::vector<int> ShareCandidates(const NodeCapacity& free, const TaskRequest& task) {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(free.gpus.size()); ++i) {
    if (free.gpus[i] >= task.gpu_milli) out.push_back(i);
  }
  return out;
}

std::optional<std::vector<int>> WholeGpus(const NodeCapacity& free, const TaskRequest& task) {
  std::vector<int> out;
  for (int i = 0;
       i < static_cast<int>(free.gpus.size()) && static_cast<int>(out.size()) < task.num_gpu; ++i) {
    if (free.gpus[i] == kMilliPerGpu) out.push_back(i);
  }
  if (static_cast<int>(out.size()) < task.num_gpu) return std::nullopt;
  return out;
}

bool ValidChoice(const NodeCapacity& free, const TaskRequest& task, const std::vector<int>& gpus) {
  if (!HostFits(free, task)) return false;
  if (static_cast<int>(gpus.size()) != std::max(task.num_gpu, 0)) return false;
  const int per = task.IsFractional() ? task.gpu_milli : static_cast<int>(kMilliPerGpu);
  for (size_t k = 0; k < gpus.size(); ++k) {
    const int g = gpus[k];
    if (g < 0 || g >= static_cast<int>(free.gpus.size())) return false;
    if (free.gpus[g] < per) return false;
    for (size_t j = 0; j < k; ++j) {
      if (gpus[j] == g) return false;
    }
  }
  return true;
}

bool Allocate(NodeCapacity& free, const TaskRequest& task, const std::vector<int>& gpus) {
  if (!ValidChoice(free, task, gpus)) return false;
  free.cpu_milli -= task.cpu_milli;
  free.memory_mib -= task.memory_mib;
  const int per = task.IsFractional() ? task.gpu_milli : static_cast<int>(kMilliPerGpu);
  for (int g : gpus) free.gpus[g] -= per;
  return true;
}

void Release(NodeCapacity& free, const TaskRequest& task, const std::vector<int>& gpus) {
  free.cpu_milli += task.cpu_milli;
  free.memory_mib += task.memory_mib;
  const int per = task.IsFractional() ? task.gpu_milli : static_cast<int>(kMilliPerGpu);
  for (int g : gpus) free.gpus[g] += per;
}

}  // namespace gpupool::sched
