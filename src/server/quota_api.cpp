#include "server/quota_api.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/json_reader.h"
#include "common/units.h"
#include "server/http_errors.h"

namespace gpupool::server {

using nlohmann::json;

namespace {

json StandingToJson(const StorageStanding& s) {
  return {{"kind", StorageHolderKindName(s.holder.kind)},
          {"name", s.holder.name},
          {"used_bytes", s.used},
          {"transient_bytes", s.transient},
          {"limit_bytes", s.limit ? json(*s.limit) : json(nullptr)},
          {"limit_is_default", s.limit_is_default}};
}

// "users" / "groups" in a path.
Result<StorageHolderKind> KindInPath(std::string_view segment) {
  if (segment == "users") return StorageHolderKind::kUser;
  if (segment == "groups") return StorageHolderKind::kGroup;
  return Status::NotFound("no such endpoint: /v1/quotas/" + std::string(segment));
}

// Whether `who` may see `h`'s standing: itself, its labs; admins anything.
bool MaySee(const Principal& who, const StorageHolder& h) {
  if (who.is_admin()) return true;
  if (h.kind == StorageHolderKind::kUser) return h.name == who.subject;
  return std::find(who.groups.begin(), who.groups.end(), h.name) != who.groups.end();
}

}  // namespace

void QuotaApi::AddRoutes(ApiRoutes& t) {
  t.Add("GET", "/v1/quotas", Access::kHandlerAuthorizes, Action::kJobRead,
        [this](net::HttpRequest&, const Principal& who, const PathParams&, Respond respond) {
          List(who, respond);
        });
  t.Add("GET", "/v1/quotas/{kind}/{name}", Access::kHandlerAuthorizes, Action::kJobRead,
        [this](net::HttpRequest&, const Principal& who, const PathParams& params, Respond respond) {
          Get(who, params, respond);
        });
  for (const char* method : {"PUT", "DELETE"}) {
    t.Add(method, "/v1/quotas/{kind}/{name}", Access::kAuthorizedFirst, Action::kAdminister,
          [this](net::HttpRequest& req, const Principal& who, const PathParams& params,
                 Respond respond) { Set(req, who, params, respond); });
  }
}

void QuotaApi::List(const Principal& who, Respond respond) {
  auto fail = [&](const Status& s) { (*respond)(ErrorResponse(s)); };
  if (Status s = Authorize(who, Action::kJobRead, {who.subject}); !s.ok()) return fail(s);
  auto all = quotas_.List();
  if (!all.ok()) return fail(all.status());
  json arr = json::array();
  for (const StorageStanding& s : *all) {
    if (MaySee(who, s.holder)) arr.push_back(StandingToJson(s));
  }
  // A user who stores nothing yet still sees where it stands.
  if (!who.is_admin()) {
    StorageHolder self{StorageHolderKind::kUser, who.subject};
    bool listed = std::any_of(all->begin(), all->end(),
                              [&](const StorageStanding& s) { return s.holder == self; });
    if (!listed) {
      auto mine = quotas_.Standing(self);
      if (!mine.ok()) return fail(mine.status());
      arr.insert(arr.begin(), StandingToJson(*mine));
    }
  }
  (*respond)(JsonResponse(200, {{"quotas", arr}}));
}

void QuotaApi::Get(const Principal& who, const PathParams& params, Respond respond) {
  auto fail = [&](const Status& s) { (*respond)(ErrorResponse(s)); };
  if (Status s = Authorize(who, Action::kJobRead, {who.subject}); !s.ok()) return fail(s);
  auto kind = KindInPath(params.find("kind")->second);
  if (!kind.ok()) return fail(kind.status());
  StorageHolder holder{*kind, params.find("name")->second};
  if (!MaySee(who, holder)) {
    return fail(Status::PermissionDenied("only admins see other users' and labs' quotas"));
  }
  auto s = quotas_.Standing(holder);
  if (!s.ok()) return fail(s.status());
  (*respond)(JsonResponse(200, StandingToJson(*s)));
}

void QuotaApi::Set(const net::HttpRequest& req, const Principal& who, const PathParams& params,
                   Respond respond) {
  auto fail = [&](const Status& s) { (*respond)(ErrorResponse(s)); };
  auto kind = KindInPath(params.find("kind")->second);
  if (!kind.ok()) return fail(kind.status());
  StorageHolder holder{*kind, params.find("name")->second};
  std::optional<int64_t> bytes;
  if (req.method == "PUT") {
    auto body = ParseJsonObject(req.body, "request body");
    if (!body.ok()) return fail(body.status());
    JsonReader r(*body, "");
    bytes = r.IntIn("bytes", 0, int64_t{1} << 60);
    if (Status s = r.Finish(); !s.ok()) return fail(s);
  }
  if (Status s = quotas_.Set(holder, bytes); !s.ok()) return fail(s);
  auth_.Audit(who.subject, bytes ? "quota.set" : "quota.clear", DescribeHolder(holder),
              bytes ? FormatBytes(*bytes) + " (" + std::to_string(*bytes) + " bytes)"
                    : "back to the server's default",
              req.peer);
  auto s = quotas_.Standing(holder);
  if (!s.ok()) return fail(s.status());
  (*respond)(JsonResponse(200, StandingToJson(*s)));
}

}  // namespace gpupool::server
