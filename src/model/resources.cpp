#include "model/resources.h"

#include <cctype>

#include "common/units.h"

namespace gpupool {
namespace {

bool EqualNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool GpuModelMatches(std::string_view gpu_name, std::string_view wanted) {
  if (wanted.empty()) return false;
  if (EqualNoCase(gpu_name, wanted)) return true;
  // Compare `wanted` with every run of whole words, so "A100" and
  // "A100-SXM4-80GB" both match "NVIDIA A100-SXM4-80GB".
  auto is_sep = [](char c) { return c == ' ' || c == '-' || c == '_'; };
  for (size_t start = 0; start < gpu_name.size(); ++start) {
    if (start > 0 && !is_sep(gpu_name[start - 1])) continue;
    if (is_sep(gpu_name[start])) continue;
    size_t end = start + wanted.size();
    if (end > gpu_name.size()) break;
    if ((end == gpu_name.size() || is_sep(gpu_name[end])) &&
        EqualNoCase(gpu_name.substr(start, wanted.size()), wanted)) {
      return true;
    }
  }
  return false;
}

std::string DescribeGpu(const GpuInfo& gpu) {
  std::string s = gpu.name + " " + FormatMebibytes(gpu.memory_mib);
  if (gpu.simulated) s += " (simulated)";
  return s;
}

int64_t ShareMemoryCapBytes(int32_t share_milli, int64_t gpu_memory_mib, int64_t asked_mib) {
  if (share_milli <= 0 || share_milli >= 1000) return 0;
  if (asked_mib > 0) return asked_mib << 20;
  return gpu_memory_mib > 0 ? (gpu_memory_mib << 20) * share_milli / 1000 : 0;
}

}  // namespace gpupool
