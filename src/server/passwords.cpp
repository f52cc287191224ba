#include "server/passwords.h"

#include <sodium.h>

namespace gpupool::server {

namespace {

bool SodiumReady() {
  static const bool ready = sodium_init() >= 0;
  return ready;
}

}  // namespace

Result<std::string> HashPassword(std::string_view password) {
  if (password.size() < 8) return Status::InvalidArgument("password: at least 8 characters");
  if (password.size() > 1024) return Status::InvalidArgument("password: at most 1024 bytes");
  if (!SodiumReady()) return Status::Internal("libsodium failed to initialise");
  char out[crypto_pwhash_STRBYTES];
  if (crypto_pwhash_str_alg(out, password.data(), password.size(),
                            crypto_pwhash_OPSLIMIT_INTERACTIVE, crypto_pwhash_MEMLIMIT_INTERACTIVE,
                            crypto_pwhash_ALG_ARGON2ID13) != 0) {
    return Status::Internal("hashing the password ran out of memory");
  }
  return std::string(out);
}

bool VerifyPassword(std::string_view password, const std::string& hash) {
  if (hash.empty() || password.size() > 1024 || !SodiumReady()) return false;
  return crypto_pwhash_str_verify(hash.c_str(), password.data(), password.size()) == 0;
}

}  // namespace gpupool::server
