// Password hashes: argon2id through libsodium, in its self-describing
// encoded form ("$argon2id$v=19$m=65536,t=2,p=1$salt$hash").
//
// Both calls take tens of milliseconds and 64 MiB on purpose: run them off
// the event loop (the API's worker thread). Thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool::server {

// InvalidArgument for passwords shorter than 8 or longer than 1024 bytes.
Result<std::string> HashPassword(std::string_view password);

// False for a wrong password, a malformed hash, or an empty hash (an account
// without password login).
bool VerifyPassword(std::string_view password, const std::string& hash);

}  // namespace gpupool::server
