#include "cli/server_flags.h"

#include <string>

#include "common/units.h"
#include "server/rate_limiter.h"

namespace gpupool::cli {

void AddServerLimitFlags(CLI::App& server, server::ServerOptions& so) {
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
}

}  // namespace gpupool::cli
