// The identity commands: gpupool login and whoami, gpupool token
// create|list|revoke, and gpupool admin user|group|audit|node. They talk to
// the endpoints of docs/api.md#identities.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace gpupool::cli {

struct IdentityFlags {
  std::function<int()> run;  // set by whichever of these commands was parsed
  std::string user, role = "member", name, scopes = "*", expires, target;
  std::vector<std::string> add, remove, gpus;
  bool password_stdin = false, shared_jobs = false, all = false, now = false;
  int64_t after = 0;
  int limit = 50;
};

// Adds `login`, `whoami` and `token` to `app`, and `user`, `group`, `audit`
// and `node` to `admin`.
void AddIdentityCommands(CLI::App& app, CLI::App& admin, GlobalFlags& g, IdentityFlags& f);

}  // namespace gpupool::cli
