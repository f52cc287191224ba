// Big-endian integers in the proto's binary framings (exec streams, tunnel
// frames). The caller checks the length before reading.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace gpupool::proto {

inline void PutU32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xff));
}

// The first 4 bytes of `in`.
inline uint32_t GetU32(std::string_view in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(in[i]);
  return v;
}

}  // namespace gpupool::proto
