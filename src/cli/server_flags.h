// The `gpupool server` flags of the server's own limits
// (docs/operator-guide.md#limits): pending jobs per user, request bodies,
// storage quotas, failed logins; and money's. Compiled into the gpupool executable,
// which links the server.
#pragma once

#include <CLI/CLI.hpp>

#include "server/server.h"

namespace gpupool::cli {

void AddServerLimitFlags(CLI::App& server, server::ServerOptions& so);
// --ledger-period, --accrual-interval, --lending-credit
// (docs/operator-guide.md#prices-credits-and-invoices); AddServerLimitFlags
// adds them too.
void AddServerMoneyFlags(CLI::App& server, server::ServerOptions& so);

}  // namespace gpupool::cli
