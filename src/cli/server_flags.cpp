#include "cli/server_flags.h"

#include <string>
#include <string_view>
#include <vector>

#include "common/units.h"
#include "server/rate_limiter.h"

namespace gpupool::cli {

void AddServerLimitFlags(CLI::App& server, server::ServerOptions& so) {
  server.add_option_function<std::vector<std::string>>(
      "--require-node-label",
      [&so](const std::vector<std::string>& flags) {
        for (const std::string& f : flags) {
          const size_t eq = f.find('=');
          if (eq == 0 || eq == std::string::npos || eq + 1 == f.size()) {
            throw CLI::ValidationError("--require-node-label", "KEY=VALUE, got \"" + f + "\"");
          }
          so.pool.required_node_labels[f.substr(0, eq)] = f.substr(eq + 1);
        }
      },
      "only nodes with this label get work, e.g. gpupool/verified=true (repeatable)");
  server
      .add_option("--max-pending-jobs-per-user", so.pool.max_pending_jobs_per_user,
                  "pending jobs one user may have (0 = no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  server.add_option_function<std::string>(
      "--max-request-body",
      [&so](const std::string& v) {
        auto bytes = ParseBytes(v);
        if (!bytes.ok() || *bytes < static_cast<int64_t>(server::kMinRequestBody)) {
          throw CLI::ValidationError("--max-request-body",
                                     "a size of at least 9MiB (chunk uploads send 8 MiB)");
        }
        so.max_request_body = static_cast<size_t>(*bytes);
      },
      "largest request body the API accepts (default 16MiB; at least 9MiB)");
  auto quota = [&server](const char* name, std::optional<int64_t>& out, const char* help) {
    server.add_option_function<std::string>(
        name,
        [name, &out](const std::string& v) {
          if (v == "none") {
            out.reset();
            return;
          }
          auto bytes = ParseBytes(v);
          if (!bytes.ok()) throw CLI::ValidationError(name, "a size such as 500GiB, or none");
          out = *bytes;
        },
        help);
  };
  quota("--user-storage-quota", so.storage.default_user_bytes,
        "what each user may keep in the blob store (inputs of running jobs, checkpoints), "
        "unless set per user (default none: unlimited)");
  quota("--group-storage-quota", so.storage.default_group_bytes,
        "the same for each group (a job's `group`), unless set per group (default none)");
  auto rate = [&server](const char* name, server::RateLimit& out, const char* help) {
    server.add_option_function<std::string>(
        name,
        [name, &out](const std::string& v) {
          auto parsed = server::ParseRateLimit(v);
          if (!parsed.ok()) throw CLI::ValidationError(name, parsed.status().message());
          out = *parsed;
        },
        help);
  };
  rate("--login-failures-per-address", so.login_limits.per_address,
       "failed password logins from one client address: RATE[,BURST] (default 1/s,10)");
  rate("--login-failures-per-user", so.login_limits.per_user,
       "failed password logins for one user name: RATE[,BURST] (default 1/m,10)");
  AddServerMoneyFlags(server, so);
}

void AddServerMoneyFlags(CLI::App& server, server::ServerOptions& so) {
  auto duration = [&server](const char* name, int64_t& out, int64_t min_ms, int64_t max_ms,
                            const char* help) {
    server.add_option_function<std::string>(
        name,
        [=, &out](const std::string& v) {
          auto ms = ParseDurationMs(v);
          // A period that divides a day puts every charge inside one UTC
          // day and month (reports and invoices by day or month are exact).
          bool divides = std::string_view(name) != "--ledger-period" ||
                         (ms.ok() && *ms > 0 && 86'400'000 % *ms == 0);
          if (!ms.ok() || *ms < min_ms || *ms > max_ms || !divides) {
            throw CLI::ValidationError(name,
                                       "a duration from " + FormatDurationMs(min_ms) + " to " +
                                           FormatDurationMs(max_ms) +
                                           (std::string_view(name) == "--ledger-period"
                                                ? " that divides a day (1m, 15m, 1h, 6h, 1d, ...)"
                                                : ""));
          }
          out = *ms;
        },
        help);
  };
  auto& money = so.accounting;
  duration("--ledger-period", money.rules.period_ms, 1'000, 86'400'000,
           "running work is posted to the ledger once per period of this length, aligned to "
           "UTC (default 1h; it must divide a day)");
  duration("--accrual-interval", money.tick_ms, 1'000, 60'000,
           "how often running work's charges are brought up to date for balances and budgets "
           "(default 1m)");
  server.add_option_function<std::string>(
      "--lending-credit",
      [&money](const std::string& v) {
        // "80%" or "80": digits and one dot, nothing else but the sign.
        std::string number = v.size() > 1 && v.back() == '%' ? v.substr(0, v.size() - 1) : v;
        size_t used = 0;
        double percent = -1;
        try {
          percent = std::stod(number, &used);
        } catch (...) {
        }
        bool plain =
            !number.empty() && number.find_first_not_of("0123456789.") == std::string::npos;
        if (!plain || used != number.size() || percent < 0 || percent > 100) {
          throw CLI::ValidationError("--lending-credit", "a percentage from 0% to 100%");
        }
        money.rules.lending_permille = static_cast<int32_t>(percent * 10 + 0.5);
      },
      "the share of what others pay for a machine's time that its owner group earns "
      "(default 80%)");
  server.add_option_function<std::string>(
      "--lending-fair-share",
      [&money](const std::string& v) {
        size_t used = 0;
        double factor = -1;
        try {
          factor = std::stod(v, &used);
        } catch (...) {
        }
        bool plain = !v.empty() && v.find_first_not_of("0123456789.") == std::string::npos;
        if (!plain || used != v.size() || factor < 0 || factor > 10) {
          throw CLI::ValidationError("--lending-fair-share", "a number from 0 to 10, such as 1");
        }
        money.lending_fair_share_permille = static_cast<int32_t>(factor * 1000 + 0.5);
      },
      "what a lab lent counts against its own fair-share usage: 1 = each GPU-hour others "
      "used on its machines (as fair share weighs it) offsets one of its own, decayed "
      "alike (default 0: off; needs GPU prices)");
}

}  // namespace gpupool::cli
