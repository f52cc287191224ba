#include "server/selftest_api.h"

#include <charconv>

#include "server/http_errors.h"

namespace gpupool::server {

void SelftestApi::AddRoutes(ApiRoutes& t) {
  t.Add("GET", "/v1/selftest/bytes", Access::kAnyToken, Action::kJobRead,
        [](net::HttpRequest& req, const Principal&, const PathParams&, Respond respond) {
          const std::string n = req.query.count("n") ? req.query.at("n") : "";
          int64_t bytes = -1;
          auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), bytes);
          if (ec != std::errc() || end != n.data() + n.size() || bytes < 0 || bytes > kMaxBytes) {
            return (*respond)(ErrorResponse(Status::InvalidArgument(
                "query parameter n: a number of bytes from 0 to " + std::to_string(kMaxBytes))));
          }
          // A xorshift stream: nothing on the way can compress it.
          net::HttpResponse r;
          r.content_type = "application/octet-stream";
          r.body.resize(static_cast<size_t>(bytes));
          uint64_t x = 0x9e3779b97f4a7c15ULL;
          for (size_t i = 0; i < r.body.size(); ++i) {
            if (i % 8 == 0) {
              x ^= x << 13;
              x ^= x >> 7;
              x ^= x << 17;
            }
            r.body[i] = static_cast<char>(x >> (8 * (i % 8)));
          }
          r.headers["Cache-Control"] = "no-store";
          (*respond)(std::move(r));
        });
}

}  // namespace gpupool::server
