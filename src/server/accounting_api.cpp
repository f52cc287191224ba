#include "server/accounting_api.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <set>

#include "common/json_reader.h"
#include "model/job_spec.h"
#include "server/api.h"
#include "server/http_errors.h"

namespace gpupool::server {

using accounting::Micros;
using nlohmann::json;

namespace {

constexpr double kMsPerHour = 3'600'000.0;

// {"<name>": 2.5, "<name>_micros": 2500000}
void PutAmount(json& j, const std::string& name, Micros amount) {
  j[name] = accounting::CreditsAsDouble(amount);
  j[name + "_micros"] = amount;
}

json PriceJson(const accounting::PriceVersion& v) {
  json j = {{"id", v.id},
            {"resource", accounting::PricedResourceName(v.resource)},
            {"class", v.gpu_class},
            {"from_ms", v.from_ms},
            {"set_by", v.set_by}};
  PutAmount(j, "price", v.per_unit);
  return j;
}

json EntryJson(const accounting::LedgerEntry& e) {
  json j = {{"id", e.id},
            {"kind", accounting::EntryKindName(e.kind)},
            {"debit", e.debit},
            {"credit", e.credit},
            {"at_ms", e.at_ms}};
  PutAmount(j, "amount", e.amount);
  if (e.kind == accounting::EntryKind::kGrant) {
    j["actor"] = e.actor;
    j["note"] = e.note;
  } else {
    j.update({{"attempt", e.attempt_id},
              {"rank", e.rank},
              {"job_id", e.job_id},
              {"user", e.user},
              {"group", e.group},
              {"node", e.node_id},
              {"provider_group", e.provider_group},
              {"class", e.gpu_class},
              {"from_ms", e.from_ms},
              {"gpu_hours", static_cast<double>(e.GpuMilliMs()) / 1000.0 / kMsPerHour}});
  }
  return j;
}

json MoneyJson(const AccountMoney& m,
               const std::map<std::string, accounting::BudgetStanding>& standings) {
  json j = {{"account", m.account}};
  PutAmount(j, "balance", m.balance());
  PutAmount(j, "posted", m.posted);
  PutAmount(j, "accruing", m.accruing);
  auto s = standings.find(m.account);
  if (s != standings.end()) {
    json b = {{"action", accounting::BudgetActionName(s->second.budget.action)},
              {"month", s->second.month},
              {"percent", s->second.percent},
              {"alert", s->second.alert},
              {"at_limit", s->second.at_limit},
              {"reason", s->second.reason}};
    PutAmount(b, "monthly", s->second.budget.monthly);
    PutAmount(b, "spent", s->second.spent);
    j["budget"] = b;
  }
  return j;
}

// Whether `who` may see `account`'s money: her own user account, her labs';
// admins any.
bool MaySee(const Principal& who, const std::string& account) {
  if (who.is_admin()) return true;
  if (account == accounting::UserAccount(who.subject)) return true;
  return std::any_of(who.groups.begin(), who.groups.end(),
                     [&](const std::string& g) { return account == accounting::GroupAccount(g); });
}

Status NotYours(const std::string& account) {
  return Status::PermissionDenied(
      "only admins see accounts other than their own and their "
      "labs' (" +
      account + ")");
}

}  // namespace

void AccountingApi::AddRoutes(ApiRoutes& t) {
  t.Add("GET", "/v1/prices", Access::kAuthorizedFirst, Action::kPoolRead,
        [this](net::HttpRequest&, const Principal&, const PathParams&, Respond respond) {
          ListPrices(respond);
        });
  t.Add("POST", "/v1/prices", Access::kAuthorizedFirst, Action::kAdminister,
        [this](net::HttpRequest& req, const Principal& who, const PathParams&, Respond respond) {
          SetPrice(req, who, respond);
        });
  t.Add("POST", "/v1/prices/quote", Access::kAuthorizedFirst, Action::kPoolRead,
        [this](net::HttpRequest& req, const Principal&, const PathParams&, Respond respond) {
          Quote(req, respond);
        });
  t.Add("GET", "/v1/accounts", Access::kHandlerAuthorizes, Action::kJobRead,
        [this](net::HttpRequest&, const Principal& who, const PathParams&, Respond respond) {
          ListAccounts(who, respond);
        });
  t.Add("GET", "/v1/accounts/{account}", Access::kHandlerAuthorizes, Action::kJobRead,
        [this](net::HttpRequest&, const Principal& who, const PathParams& p, Respond respond) {
          GetAccount(who, p.find("account")->second, respond);
        });
  t.Add("GET", "/v1/accounts/{account}/history", Access::kHandlerAuthorizes, Action::kJobRead,
        [this](net::HttpRequest& req, const Principal& who, const PathParams& p, Respond respond) {
          History(req, who, p.find("account")->second, respond);
        });
  t.Add("POST", "/v1/accounts/{account}/credits", Access::kAuthorizedFirst, Action::kAdminister,
        [this](net::HttpRequest& req, const Principal& who, const PathParams& p, Respond respond) {
          AddCredits(req, who, p.find("account")->second, respond);
        });
  for (const char* method : {"PUT", "DELETE"}) {
    t.Add(method, "/v1/budgets/{account}", Access::kAuthorizedFirst, Action::kAdminister,
          [this](net::HttpRequest& req, const Principal& who, const PathParams& p,
                 Respond respond) { SetBudget(req, who, p.find("account")->second, respond); });
  }
  t.Add("GET", "/v1/ledger", Access::kHandlerAuthorizes, Action::kJobRead,
        [this](net::HttpRequest& req, const Principal& who, const PathParams&, Respond respond) {
          Ledger(req, who, respond);
        });
  t.Add("GET", "/v1/statement", Access::kHandlerAuthorizes, Action::kJobRead,
        [this](net::HttpRequest& req, const Principal& who, const PathParams&, Respond respond) {
          Statement(req, who, respond);
        });
  t.Add("GET", "/v1/usage", Access::kHandlerAuthorizes, Action::kJobRead,
        [this](net::HttpRequest& req, const Principal& who, const PathParams&, Respond respond) {
          Usage(req, who, respond);
        });
}

void AccountingApi::ListPrices(Respond respond) {
  auto book = accounting_.Prices();
  if (!book.ok()) return (*respond)(ErrorResponse(book.status()));
  json in_force = json::array(), history = json::array();
  for (const auto& v : book->InForce(clock_.NowMs())) in_force.push_back(PriceJson(v));
  for (const auto& v : book->versions()) history.push_back(PriceJson(v));
  (*respond)(JsonResponse(200, {{"prices", in_force}, {"history", history}}));
}

void AccountingApi::SetPrice(const net::HttpRequest& req, const Principal& who, Respond respond) {
  auto fail = [&](const Status& s) { (*respond)(ErrorResponse(s)); };
  auto body = ParseJsonObject(req.body, "request body");
  if (!body.ok()) return fail(body.status());
  JsonReader r(*body, "");
  std::string resource_name = r.Str("resource", false, "gpu");
  std::string gpu_class = r.Str("class", false);
  std::string price_text = r.Str("price");
  if (Status s = r.Finish(); !s.ok()) return fail(s);
  auto resource = accounting::ParsePricedResource(resource_name);
  if (!resource.ok()) return fail(resource.status());
  auto price = accounting::ParseCredits(price_text, "price", accounting::kMaxPricePerUnit);
  if (!price.ok()) return fail(price.status());
  auto v = accounting_.SetPrice(*resource, gpu_class, *price, who.subject);
  if (!v.ok()) return fail(v.status());
  static constexpr const char* kUnit[] = {"GPU-hour", "CPU-hour", "GiB-hour", "GiB-month"};
  auth_.Audit(who.subject, "price.set", resource_name + (gpu_class.empty() ? "" : " " + gpu_class),
              accounting::FormatCredits(*price) + " credits per " +
                  kUnit[static_cast<int>(*resource)] + " from " + std::to_string(v->from_ms),
              req.peer);
  (*respond)(JsonResponse(201, PriceJson(*v)));
}

void AccountingApi::Quote(const net::HttpRequest& req, Respond respond) {
  auto fail = [&](const Status& s) { (*respond)(ErrorResponse(s)); };
  Result<JobSpec> spec = JobSpecFromRequest(req);
  if (!spec.ok()) return fail(spec.status());
  auto book = accounting_.Prices();
  if (!book.ok()) return fail(book.status());
  int64_t now = clock_.NowMs();
  const Resources& res = spec->resources;
  const int64_t nodes = std::max<int32_t>(res.nodes, 1);
  // The classes it may land on: those of the pool's GPUs that its
  // gpu_models allow (any without); in a pool with no machines yet, every
  // priced class its gpu_models name, and the rest at "default" or free.
  std::set<std::string> classes;
  auto allowed = [&](const std::string& gpu_name) {
    return res.gpu_models.empty() ||
           std::any_of(res.gpu_models.begin(), res.gpu_models.end(),
                       [&](const auto& w) { return GpuModelMatches(gpu_name, w); });
  };
  std::vector<Node> pool_nodes;
  Status read = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(pool_nodes, tx.ListNodes());
    return Status::Ok();
  });
  if (!read.ok()) return fail(read);
  for (const Node& n : pool_nodes) {
    if (n.state == NodeState::kLeft) continue;
    for (const GpuInfo& g : n.gpus)
      if (allowed(g.name)) classes.insert(book->ClassOf(g));
  }
  if (classes.empty()) {
    for (const auto& v : book->InForce(now)) {
      if (v.resource == accounting::PricedResource::kGpu &&
          v.gpu_class != accounting::kDefaultGpuClass && allowed(v.gpu_class))
        classes.insert(v.gpu_class);
    }
    bool has_default = book->PriceAt(accounting::PricedResource::kGpu,
                                     std::string(accounting::kDefaultGpuClass), now) > 0;
    classes.insert(has_default ? std::string(accounting::kDefaultGpuClass) : "");
  }
  json per_class = json::array();
  Micros lo = INT64_MAX, hi = 0;
  for (const std::string& cls : classes) {
    accounting::MeteredUse use{cls, res.GpuMilliPerNode() * nodes, res.cpu_milli * nodes,
                               res.memory_mib * nodes};
    Micros per_hour = book->PerHour(use, now);
    lo = std::min(lo, per_hour);
    hi = std::max(hi, per_hour);
    json c = {{"class", cls}};
    PutAmount(c, "per_hour", per_hour);
    per_class.push_back(c);
  }
  json out = {{"classes", per_class}};
  PutAmount(out, "per_hour_min", lo);
  PutAmount(out, "per_hour_max", hi);
  if (spec->max_runtime_ms > 0) {
    out["max_runtime_ms"] = spec->max_runtime_ms;
    PutAmount(out, "most",
              static_cast<Micros>(static_cast<__int128>(hi) * spec->max_runtime_ms / 3'600'000));
  }
  (*respond)(JsonResponse(200, out));
}

void AccountingApi::ListAccounts(const Principal& who, Respond respond) {
  // The role and the token's scopes first (an agent's or a join token, a
  // token without jobs:read, reads no money), then whose accounts.
  if (Status st = Authorize(who, Action::kJobRead, {who.subject}); !st.ok())
    return (*respond)(ErrorResponse(st));
  auto all = accounting_.Accounts();
  if (!all.ok()) return (*respond)(ErrorResponse(all.status()));
  std::map<std::string, AccountMoney> shown;
  for (const AccountMoney& m : *all) {
    if (MaySee(who, m.account)) shown[m.account] = m;
  }
  // A member sees where her own and her labs' accounts stand, spent or not.
  if (!who.is_admin()) {
    std::vector<std::string> mine{accounting::UserAccount(who.subject)};
    for (const auto& g : who.groups) mine.push_back(accounting::GroupAccount(g));
    for (const auto& a : mine) shown.emplace(a, AccountMoney{a, 0, 0});
  }
  json arr = json::array();
  for (const auto& [account, m] : shown) arr.push_back(MoneyJson(m, budgets_.Standings()));
  (*respond)(JsonResponse(200, {{"accounts", arr}}));
}

void AccountingApi::GetAccount(const Principal& who, const std::string& account, Respond respond) {
  // The role and the token's scopes first (an agent's or a join token, a
  // token without jobs:read, reads no money), then whose accounts.
  if (Status st = Authorize(who, Action::kJobRead, {who.subject}); !st.ok())
    return (*respond)(ErrorResponse(st));
  if (Status s = accounting::CheckAccountName(account); !s.ok())
    return (*respond)(ErrorResponse(s));
  if (!MaySee(who, account)) return (*respond)(ErrorResponse(NotYours(account)));
  auto m = accounting_.Account(account);
  if (!m.ok()) return (*respond)(ErrorResponse(m.status()));
  (*respond)(JsonResponse(200, MoneyJson(*m, budgets_.Standings())));
}

void AccountingApi::History(const net::HttpRequest& req, const Principal& who,
                            const std::string& account, Respond respond) {
  auto fail = [&](const Status& s) { (*respond)(ErrorResponse(s)); };
  if (Status st = Authorize(who, Action::kJobRead, {who.subject}); !st.ok()) return fail(st);
  if (Status s = accounting::CheckAccountName(account); !s.ok()) return fail(s);
  if (!MaySee(who, account)) return fail(NotYours(account));
  // Whole UTC days: from since's day (default 30 days back) to until's.
  constexpr int64_t kDayMs = 86'400'000;
  constexpr int64_t kMaxDays = 731;
  const int64_t now = clock_.NowMs();
  auto since = QueryTime(req, "since", now, now - 29 * kDayMs);
  auto until = QueryTime(req, "until", now, now);
  if (!since.ok()) return fail(since.status());
  if (!until.ok()) return fail(until.status());
  const int64_t first = *since - *since % kDayMs;
  const int64_t end = *until - *until % kDayMs + kDayMs;
  if (*since < 0 || *until < *since)
    return fail(Status::InvalidArgument("since: must be after 1970 and before until"));
  if ((end - first) / kDayMs > kMaxDays)
    return fail(Status::InvalidArgument("until: at most 731 days after since"));
  std::vector<AccountFlow> flows;
  Status st = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(flows, tx.AccountFlows(account, first, end));
    return Status::Ok();
  });
  if (!st.ok()) return fail(st);
  // Every day of the window, in order, with what each kind of entry moved
  // into the account (negative: out of it).
  std::map<int64_t, std::array<Micros, 3>> net;
  for (int64_t d = first; d < end; d += kDayMs) net[d] = {0, 0, 0};
  for (const AccountFlow& f : flows) net[f.day_ms][static_cast<size_t>(f.kind)] += f.in - f.out;
  json days = json::array();
  accounting::LedgerEntry at;  // names each day as usage reports do
  for (const auto& [day, by_kind] : net) {
    at.from_ms = day;
    json d = {{"day", UsageKeyOf(at, UsageBy::kDay)}, {"from_ms", day}};
    PutAmount(d, "charges", by_kind[0]);
    PutAmount(d, "lending", by_kind[1]);
    PutAmount(d, "grants", by_kind[2]);
    days.push_back(d);
  }
  (*respond)(JsonResponse(
      200, {{"account", account}, {"since_ms", first}, {"until_ms", end}, {"days", days}}));
}

void AccountingApi::AddCredits(const net::HttpRequest& req, const Principal& who,
                               const std::string& account, Respond respond) {
  auto fail = [&](const Status& s) { (*respond)(ErrorResponse(s)); };
  auto body = ParseJsonObject(req.body, "request body");
  if (!body.ok()) return fail(body.status());
  JsonReader r(*body, "");
  std::string amount_text = r.Str("amount");
  std::string note = r.Str("note", false);
  if (Status s = r.Finish(); !s.ok()) return fail(s);
  auto amount = accounting::ParseCredits(amount_text, "amount");
  if (!amount.ok()) return fail(amount.status());
  if (Status s = CheckAccountExists(account); !s.ok()) return fail(s);
  auto e = accounting_.Grant(account, *amount, note, who.subject);
  if (!e.ok()) return fail(e.status());
  // Money came back: held work may run now.
  if (Status s = budgets_.Evaluate(); !s.ok()) return fail(s);
  auth_.Audit(who.subject, "credit.add", account,
              accounting::FormatCredits(*amount) + " credits" + (note.empty() ? "" : ": " + note),
              req.peer);
  (*respond)(JsonResponse(201, EntryJson(*e)));
}

Status AccountingApi::CheckAccountExists(const std::string& account) {
  GP_RETURN_IF_ERROR(accounting::CheckAccountName(account));
  // Only accounts of users and labs that exist: a typo is not an account.
  if (account.rfind("group:", 0) == 0) {
    GP_ASSIGN_OR_RETURN(bool lab, auth_.IsLab(account.substr(6)));
    if (!lab) return Status::NotFound("account: there is no lab " + account.substr(6));
  } else if (account.rfind("user:", 0) == 0) {
    GP_ASSIGN_OR_RETURN(auto user, auth_.GetUser(account.substr(5)));
    if (!user) return Status::NotFound("account: there is no user " + account.substr(5));
  }
  return Status::Ok();
}

void AccountingApi::SetBudget(const net::HttpRequest& req, const Principal& who,
                              const std::string& account, Respond respond) {
  auto fail = [&](const Status& s) { (*respond)(ErrorResponse(s)); };
  if (Status s = CheckAccountExists(account); !s.ok()) return fail(s);
  if (req.method == "DELETE") {
    if (Status s = budgets_.ClearBudget(account); !s.ok()) return fail(s);
    auth_.Audit(who.subject, "budget.clear", account, "no budget", req.peer);
    return (*respond)(JsonResponse(200, {{"account", account}, {"budget", nullptr}}));
  }
  auto body = ParseJsonObject(req.body, "request body");
  if (!body.ok()) return fail(body.status());
  JsonReader r(*body, "");
  std::string monthly_text = r.Str("monthly", false, "0");
  std::string action_text = r.Str("action", false, "hold");
  if (Status s = r.Finish(); !s.ok()) return fail(s);
  auto monthly = accounting::ParseCredits(monthly_text, "monthly");
  if (!monthly.ok()) return fail(monthly.status());
  auto action = accounting::ParseBudgetAction(action_text);
  if (!action.ok()) return fail(action.status());
  auto b = budgets_.SetBudget(account, *monthly, *action, who.subject);
  if (!b.ok()) return fail(b.status());
  auth_.Audit(who.subject, "budget.set", account,
              (*monthly > 0 ? accounting::FormatCredits(*monthly) + " credits a month"
                            : std::string("its balance")) +
                  ", then " + action_text,
              req.peer);
  auto m = accounting_.Account(account);
  if (!m.ok()) return fail(m.status());
  (*respond)(JsonResponse(200, MoneyJson(*m, budgets_.Standings())));
}

void AccountingApi::Ledger(const net::HttpRequest& req, const Principal& who, Respond respond) {
  // The role and the token's scopes first (an agent's or a join token, a
  // token without jobs:read, reads no money), then whose accounts.
  if (Status st = Authorize(who, Action::kJobRead, {who.subject}); !st.ok())
    return (*respond)(ErrorResponse(st));
  auto fail = [&](const Status& s) { (*respond)(ErrorResponse(s)); };
  LedgerQuery q;
  if (auto it = req.query.find("account"); it != req.query.end()) q.account = it->second;
  if (!q.account.empty()) {
    if (Status s = accounting::CheckAccountName(q.account); !s.ok()) return fail(s);
  }
  if (q.account.empty() ? !who.is_admin() : !MaySee(who, q.account)) {
    return fail(q.account.empty() ? Status::PermissionDenied("account: name one of your accounts "
                                                             "(user:" +
                                                             who.subject + " or group:LAB)")
                                  : NotYours(q.account));
  }
  if (auto it = req.query.find("kind"); it != req.query.end() && !it->second.empty()) {
    auto kind = accounting::ParseEntryKind(it->second);
    if (!kind.ok()) return fail(kind.status());
    q.kind = *kind;
  }
  int64_t now = clock_.NowMs();
  auto since = QueryTime(req, "since", now, INT64_MIN);
  auto until = QueryTime(req, "until", now, INT64_MAX);
  auto after = QueryInt(req, "after", 0, 0, INT64_MAX);
  auto limit = QueryInt(req, "limit", 1000, 1, 10000);
  for (const Status* s : {&since.status(), &until.status(), &after.status(), &limit.status()})
    if (!s->ok()) return fail(*s);
  q.since_ms = *since;
  q.until_ms = *until;
  q.after_id = *after;
  q.limit = static_cast<int32_t>(*limit);
  std::vector<accounting::LedgerEntry> entries;
  Status st = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(entries, tx.ListLedger(q));
    return Status::Ok();
  });
  if (!st.ok()) return fail(st);
  json arr = json::array();
  for (const auto& e : entries) arr.push_back(EntryJson(e));
  json out = {{"entries", arr}};
  if (static_cast<int64_t>(entries.size()) == *limit) out["next_after"] = entries.back().id;
  (*respond)(JsonResponse(200, out));
}

void AccountingApi::Usage(const net::HttpRequest& req, const Principal& who, Respond respond) {
  // The role and the token's scopes first (an agent's or a join token, a
  // token without jobs:read, reads no money), then whose accounts.
  if (Status st = Authorize(who, Action::kJobRead, {who.subject}); !st.ok())
    return (*respond)(ErrorResponse(st));
  auto fail = [&](const Status& s) { (*respond)(ErrorResponse(s)); };
  UsageQuery q;
  if (auto it = req.query.find("by"); it != req.query.end() && !it->second.empty()) {
    auto by = ParseUsageBy(it->second);
    if (!by.ok()) return fail(by.status());
    q.by = *by;
  }
  if (auto it = req.query.find("group"); it != req.query.end()) q.group = it->second;
  if (auto it = req.query.find("user"); it != req.query.end()) q.user = it->second;
  if (auto it = req.query.find("account"); it != req.query.end()) q.account = it->second;
  int64_t now = clock_.NowMs();
  auto since = QueryTime(req, "since", now, INT64_MIN);
  auto until = QueryTime(req, "until", now, INT64_MAX);
  if (!since.ok()) return fail(since.status());
  if (!until.ok()) return fail(until.status());
  q.since_ms = *since;
  q.until_ms = *until;
  if (!q.account.empty()) {
    if (Status s = accounting::CheckAccountName(q.account); !s.ok()) return fail(s);
    if (!MaySee(who, q.account)) return fail(NotYours(q.account));
  }
  // Charges paid from an account the caller may see are hers to see, by
  // any key; otherwise a member sees her labs' or her own charges.
  if (!who.is_admin() && q.account.empty()) {
    bool member = std::find(who.groups.begin(), who.groups.end(), q.group) != who.groups.end();
    if (!q.group.empty() && !member) {
      return fail(Status::PermissionDenied("group: you are not a member of " + q.group));
    }
    if (q.group.empty()) {
      if (!q.user.empty() && q.user != who.subject) {
        return fail(Status::PermissionDenied("user: only admins see other users' usage"));
      }
      q.user = who.subject;
    }
  }
  std::vector<UsageRow> rows;
  Status st = store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(rows, tx.SumUsage(q));
    return Status::Ok();
  });
  if (!st.ok()) return fail(st);
  json arr = json::array();
  UsageRow total{"total", 0, 0, 0, 0};
  for (const UsageRow& r : rows) {
    json j = {{"key", r.key},
              {"gpu_hours", static_cast<double>(r.gpu_milli_ms) / 1000.0 / kMsPerHour},
              {"cpu_hours", static_cast<double>(r.cpu_milli_ms) / 1000.0 / kMsPerHour},
              {"charges", r.charges}};
    PutAmount(j, "cost", r.cost);
    arr.push_back(j);
    total.gpu_milli_ms += r.gpu_milli_ms;
    total.cpu_milli_ms += r.cpu_milli_ms;
    total.cost += r.cost;
    total.charges += r.charges;
  }
  json t = {{"gpu_hours", static_cast<double>(total.gpu_milli_ms) / 1000.0 / kMsPerHour},
            {"cpu_hours", static_cast<double>(total.cpu_milli_ms) / 1000.0 / kMsPerHour},
            {"charges", total.charges}};
  PutAmount(t, "cost", total.cost);
  (*respond)(JsonResponse(200, {{"by", UsageByName(q.by)}, {"rows", arr}, {"total", t}}));
}

void AccountingApi::Statement(const net::HttpRequest& req, const Principal& who, Respond respond) {
  // The role and the token's scopes first (an agent's or a join token, a
  // token without jobs:read, reads no money), then whose accounts.
  if (Status st = Authorize(who, Action::kJobRead, {who.subject}); !st.ok())
    return (*respond)(ErrorResponse(st));
  auto fail = [&](const Status& s) { (*respond)(ErrorResponse(s)); };
  auto param = [&](const char* name) {
    auto it = req.query.find(name);
    return it == req.query.end() ? std::string() : it->second;
  };
  std::string account = param("account");
  if (Status s = accounting::CheckAccountName(account); !s.ok()) return fail(s);
  if (!MaySee(who, account)) return fail(NotYours(account));
  auto month = ParseMonth(param("month"), "month");
  if (!month.ok()) return fail(month.status());
  auto [from, to] = *month;
  // Entries with at_ms in (from, to]: a charge's interval never spans a
  // ledger period and periods divide days, so these are exactly the
  // charges that began in the month (one ending at its first midnight
  // belongs to the month before). A grant made at midnight exactly counts
  // for the month before.
  std::vector<accounting::LedgerEntry> entries;
  Status st = store_.Transact([&](Tx& tx) -> Status {
    LedgerQuery q;
    q.account = account;
    q.since_ms = from + 1;
    q.until_ms = to + 1;
    q.limit = 10'000;
    while (true) {
      GP_ASSIGN_OR_RETURN(auto page, tx.ListLedger(q));
      entries.insert(entries.end(), page.begin(), page.end());
      if (static_cast<int32_t>(page.size()) < q.limit) return Status::Ok();
      q.after_id = page.back().id;
    }
  });
  if (!st.ok()) return fail(st);
  struct Sum {
    int64_t gpu_milli_ms = 0;
    Micros amount = 0;
  };
  std::map<std::pair<int64_t, std::string>, std::pair<std::string, Sum>> jobs;  // (job, class)
  std::map<std::string, Sum> classes;
  Sum charged, earned;
  Micros granted = 0;
  json grants = json::array();
  for (const auto& e : entries) {
    if (e.kind == accounting::EntryKind::kCharge && e.debit == account) {
      auto& [user, sum] = jobs[{e.job_id, e.gpu_class}];
      user = e.user;
      for (Sum* s : {&sum, &classes[e.gpu_class], &charged}) {
        s->gpu_milli_ms += e.GpuMilliMs();
        s->amount += e.amount;
      }
    } else if (e.kind == accounting::EntryKind::kLending && e.credit == account) {
      earned.gpu_milli_ms += e.GpuMilliMs();
      earned.amount += e.amount;
    } else if (e.kind == accounting::EntryKind::kGrant && e.credit == account) {
      granted += e.amount;
      json g = {{"at_ms", e.at_ms}, {"note", e.note}, {"actor", e.actor}};
      PutAmount(g, "amount", e.amount);
      grants.push_back(g);
    }
  }
  auto hours = [](int64_t milli_ms) { return static_cast<double>(milli_ms) / 1000.0 / kMsPerHour; };
  json job_rows = json::array(), class_rows = json::array();
  for (const auto& [key, v] : jobs) {
    json j = {{"job_id", key.first},
              {"class", key.second},
              {"user", v.first},
              {"gpu_hours", hours(v.second.gpu_milli_ms)}};
    PutAmount(j, "cost", v.second.amount);
    job_rows.push_back(j);
  }
  for (const auto& [cls, v] : classes) {
    json c = {{"class", cls}, {"gpu_hours", hours(v.gpu_milli_ms)}};
    PutAmount(c, "cost", v.amount);
    class_rows.push_back(c);
  }
  json lending = {{"gpu_hours", hours(earned.gpu_milli_ms)}};
  PutAmount(lending, "earned", earned.amount);
  json totals = json::object();
  PutAmount(totals, "charged", charged.amount);
  PutAmount(totals, "earned", earned.amount);
  PutAmount(totals, "granted", granted);
  PutAmount(totals, "net", granted + earned.amount - charged.amount);
  totals["gpu_hours"] = hours(charged.gpu_milli_ms);
  json out = {{"account", account}, {"month", param("month")}, {"from_ms", from},
              {"to_ms", to},        {"jobs", job_rows},        {"classes", class_rows},
              {"lending", lending}, {"grants", grants},        {"totals", totals}};
  auto now = accounting_.Account(account);
  if (now.ok()) PutAmount(out, "balance_now", now->balance());
  (*respond)(JsonResponse(200, out));
}

}  // namespace gpupool::server
