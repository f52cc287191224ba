// See devices.h.
#include "devices.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace fake_cuda {
namespace {

constexpr unsigned long long kMiB = 1024ULL * 1024ULL;

uint64_t Fnv1a(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ULL ^ seed;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// The entry of CUDA_VISIBLE_DEVICES `token` names, or -1.
int FindVisible(const std::vector<Device>& all, const std::string& token) {
  if (!token.empty() && std::isdigit(static_cast<unsigned char>(token[0]))) {
    if (!std::all_of(token.begin(), token.end(), [](unsigned char c) { return std::isdigit(c); }) ||
        token.size() > 9) {
      return -1;
    }
    int index = std::stoi(token);
    return index < static_cast<int>(all.size()) ? index : -1;
  }
  if (token.rfind("GPU-", 0) != 0 && token.rfind("MIG-", 0) != 0) return -1;
  int found = -1;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].uuid.rfind(token, 0) != 0) continue;
    if (found >= 0) return -1;  // ambiguous prefix
    found = static_cast<int>(i);
  }
  return found;
}

}  // namespace

CUuuid UuidBytes(const std::string& uuid) {
  CUuuid out{};
  std::string hex;
  if (uuid.rfind("GPU-", 0) == 0) {
    for (char c : uuid.substr(4)) {
      if (c != '-') hex += c;
    }
  }
  bool parseable = hex.size() == 32 && std::all_of(hex.begin(), hex.end(), [](unsigned char c) {
                     return std::isxdigit(c) != 0;
                   });
  for (int i = 0; i < 16; ++i) {
    if (parseable) {
      out.bytes[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    } else {
      out.bytes[i] = static_cast<char>(Fnv1a(uuid, i / 8) >> (8 * (i % 8)));
    }
  }
  return out;
}

std::optional<std::vector<Device>> ReadConfig() {
  const char* path = std::getenv("FAKE_NVML_CONFIG");
  if (path == nullptr || *path == '\0') return std::nullopt;
  try {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    nlohmann::json j = nlohmann::json::parse(in);
    std::vector<Device> all;
    for (const auto& d : j.value("devices", nlohmann::json::array())) {
      Device device;
      device.uuid = d.value("uuid", "");
      device.name = d.value("name", "");
      device.total_bytes = d.value("memory_total_mib", 0ULL) * kMiB;
      device.id = UuidBytes(device.uuid);
      all.push_back(std::move(device));
    }
    return all;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fake_cuda: bad config %s: %s\n", path, e.what());
    return std::nullopt;
  }
}

std::vector<Device> FilterVisible(const std::vector<Device>& all, const char* env) {
  if (env == nullptr) return all;
  std::vector<Device> visible;
  std::vector<bool> taken(all.size(), false);
  std::stringstream list(env);
  std::string token;
  while (std::getline(list, token, ',')) {
    token.erase(0, token.find_first_not_of(" \t"));
    token.erase(token.find_last_not_of(" \t") + 1);
    int index = FindVisible(all, token);
    if (index < 0 || taken[index]) break;
    taken[index] = true;
    visible.push_back(all[index]);
  }
  return visible;
}

}  // namespace fake_cuda
