#include "model/resources.h"

#include <cctype>

#include "common/units.h"
#include "model/yaml.h"

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

// Reads a decimal number of 1 to 4 digits at the front of `s`, no leading
// zero; nullopt otherwise.
std::optional<int32_t> LeadingNumber(std::string_view& s) {
  size_t n = 0;
  while (n < s.size() && n < 5 && s[n] >= '0' && s[n] <= '9') ++n;
  if (n == 0 || n > 4 || (n > 1 && s[0] == '0')) return std::nullopt;
  int32_t v = 0;
  for (size_t i = 0; i < n; ++i) v = v * 10 + (s[i] - '0');
  s.remove_prefix(n);
  return v;
}

bool Eat(std::string_view& s, std::string_view what) {
  if (!s.starts_with(what)) return false;
  s.remove_prefix(what.size());
  return true;
}

constexpr int32_t kMaxMigSlices = 64;
constexpr int32_t kMaxMigGb = 4096;

// "<N>g.<M>gb" exactly, or nullopt.
std::optional<Resources::Mig> ExactProfile(std::string_view s) {
  Resources::Mig m;
  auto slices = LeadingNumber(s);
  if (!slices || !Eat(s, "g.")) return std::nullopt;
  auto gb = LeadingNumber(s);
  if (!gb || !Eat(s, "gb") || !s.empty()) return std::nullopt;
  if (*slices < 1 || *slices > kMaxMigSlices || *gb < 1 || *gb > kMaxMigGb) return std::nullopt;
  m.slices = *slices;
  m.memory_gb = *gb;
  return m;
}

}  // namespace

Result<Resources::Mig> ParseMigProfile(std::string_view text) {
  if (auto m = ExactProfile(text)) return *m;
  return Status::InvalidArgument(
      "invalid MIG profile " + QuoteForError(text) +
      ": expected <slices>g.<memory>gb such as \"1g.10gb\" or \"3g.40gb\" (slices 1 to " +
      std::to_string(kMaxMigSlices) + ", memory 1 to " + std::to_string(kMaxMigGb) + " GB)");
}

std::optional<Resources::Mig> MigProfileOf(std::string_view text) {
  if (size_t plus = text.find('+'); plus != std::string_view::npos) text = text.substr(0, plus);
  // A compute instance's profile: "<C>c.<N>g.<M>gb" owns C of the N slices.
  std::string_view rest = text;
  if (auto c = LeadingNumber(rest); c && Eat(rest, "c.")) {
    auto m = ExactProfile(rest);
    if (!m || *c > m->slices) return std::nullopt;
    m->slices = *c;
    return m;
  }
  return ExactProfile(text);
}

std::string FormatMigProfile(const Resources::Mig& mig) {
  return std::to_string(mig.slices) + "g." + std::to_string(mig.memory_gb) + "gb";
}

bool MigFits(const Resources::Mig& have, const Resources::Mig& want) {
  return have.slices >= want.slices && have.memory_gb >= want.memory_gb;
}

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
  std::string s = gpu.name;
  if (gpu.IsMig()) s += " MIG " + gpu.mig_profile;
  s += " " + FormatMebibytes(gpu.memory_mib);
  if (gpu.simulated) s += " (simulated)";
  return s;
}

int64_t ShareMemoryCapBytes(int32_t share_milli, int64_t gpu_memory_mib, int64_t asked_mib) {
  if (share_milli <= 0 || share_milli >= 1000) return 0;
  if (asked_mib > 0) return asked_mib << 20;
  return gpu_memory_mib > 0 ? (gpu_memory_mib << 20) * share_milli / 1000 : 0;
}

}  // namespace gpupool
