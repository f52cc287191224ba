// Random secrets and identifiers from the kernel's CSPRNG (getrandom).
// Thread-safe; never seeded by the caller, so not for deterministic layers.
#pragma once

#include <string>
#include <string_view>

namespace gpupool {

// `bytes` random bytes as lowercase hex.
std::string RandomHex(size_t bytes);

// An identifier such as "n-3f9a0c1b2d4e" (prefix, dash, 12 hex digits).
std::string NewId(std::string_view prefix);

// SHA-256 of `data` as lowercase hex; used to store tokens hashed.
std::string Sha256Hex(std::string_view data);
// Whether `s` looks like Sha256Hex's output: 64 lowercase hex digits (blob
// chunk and manifest ids).
bool IsSha256Hex(std::string_view s);

}  // namespace gpupool
