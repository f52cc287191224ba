// The `gpupool server` flags of the server's own limits
// (docs/operator-guide.md#limits): pending jobs per user, request bodies,
// storage quotas, failed logins. Compiled into the gpupool executable,
// which links the server.
#pragma once

#include <CLI/CLI.hpp>

#include "server/server.h"

namespace gpupool::cli {

void AddServerLimitFlags(CLI::App& server, server::ServerOptions& so);

}  // namespace gpupool::cli
