// SqlTx's accounting facet (store/sql_tx.h): price versions, the
// append-only ledger (schema version 10) and the balances each posting
// moves, and usage reports summed by SQLite: over whole days or months from
// the usage rollups (version 11) each charge also adds to, else from the
// ledger.

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "accounting/budgets.h"
#include "store/sql_rows.h"
#include "store/sql_tx.h"

namespace gpupool {
namespace {

using accounting::AccountBalance;
using accounting::LedgerEntry;
using accounting::PriceVersion;

constexpr const char* kLedgerColumns =
    "id, key, kind, debit, credit, amount, at_ms, attempt_id, rank, job_id, \"user\", grp, "
    "node_id, "
    "provider_group, gpu_class, from_ms, gpu_milli, cpu_milli, memory_mib, actor, note";

Result<PriceVersion> ReadPrice(const Query& q) {
  PriceVersion v;
  v.id = q.Int(0);
  GP_ASSIGN_OR_RETURN(v.resource, accounting::ParsePricedResource(q.Text(1)));
  v.gpu_class = q.Text(2);
  v.per_unit = q.Int(3);
  v.from_ms = q.Int(4);
  v.set_by = q.Text(5);
  return v;
}

Result<LedgerEntry> ReadEntry(const Query& q) {
  LedgerEntry e;
  e.id = q.Int(0);
  e.key = q.Text(1);
  GP_ASSIGN_OR_RETURN(e.kind, accounting::ParseEntryKind(q.Text(2)));
  e.debit = q.Text(3);
  e.credit = q.Text(4);
  e.amount = q.Int(5);
  e.at_ms = q.Int(6);
  e.attempt_id = q.Text(7);
  e.rank = static_cast<int32_t>(q.Int(8));
  e.job_id = q.Int(9);
  e.user = q.Text(10);
  e.group = q.Text(11);
  e.node_id = q.Text(12);
  e.provider_group = q.Text(13);
  e.gpu_class = q.Text(14);
  e.from_ms = q.Int(15);
  e.gpu_milli = q.Int(16);
  e.cpu_milli = q.Int(17);
  e.memory_mib = q.Int(18);
  e.actor = q.Text(19);
  e.note = q.Text(20);
  return e;
}

Result<AccountFlow> ReadFlow(const Query& q) {
  AccountFlow f;
  f.day_ms = q.Int(0);
  GP_ASSIGN_OR_RETURN(f.kind, accounting::ParseEntryKind(q.Text(1)));
  f.in = q.Int(2);
  f.out = q.Int(3);
  f.entries = q.Int(4);
  return f;
}

Result<AccountBalance> ReadBalance(const Query& q) {
  return AccountBalance{q.Text(0), q.Int(1), q.Int(2)};
}

constexpr int64_t kDayMs = 86'400'000;

// The SQL expression of a usage report's key, over the ledger's or the
// rollup's columns (`start` is the time column: from_ms or start_ms).
std::string UsageKeySql(SqlDialect d, UsageBy by, const std::string& start) {
  switch (by) {
    case UsageBy::kJob:
      return "job_id";
    case UsageBy::kUser:
      return "\"user\"";
    case UsageBy::kGroup:
      return "grp";
    case UsageBy::kAccount:
      return "debit";
    case UsageBy::kNode:
      return "node_id";
    case UsageBy::kModel:
      return "gpu_class";
    case UsageBy::kDay:
      return SqlUtcDay(d, start);
    case UsageBy::kMonth:
      return SqlUtcMonth(d, start);
  }
  return "\"user\"";
}

// The rollup (schema version 11) a usage report can be summed from, or
// nullptr when only the ledger answers it: reports by job, reports by node
// of one user or lab, and windows that are not whole days.
const char* RollupGrain(const UsageQuery& q) {
  auto aligned = [&](int64_t ms, bool month) {
    if (ms == INT64_MIN || ms == INT64_MAX) return true;
    return month ? accounting::MonthOf(ms).from_ms == ms : ms % kDayMs == 0;
  };
  const bool where = q.by == UsageBy::kNode;
  const bool filtered = !(q.group.empty() && q.user.empty() && q.account.empty());
  if (q.by == UsageBy::kJob || (where && filtered)) return nullptr;
  if (q.by != UsageBy::kDay && aligned(q.since_ms, true) && aligned(q.until_ms, true)) {
    return where ? "node-month" : "who-month";
  }
  if (aligned(q.since_ms, false) && aligned(q.until_ms, false)) {
    return where ? "node-day" : "who-day";
  }
  return nullptr;
}

// Adds a posted charge to the four rollups that count it.
Status AddToRollups(SqlConn& conn, const LedgerEntry& e) {
  for (const char* grain : {"who-day", "who-month", "node-day", "node-month"}) {
    GP_ASSIGN_OR_RETURN(
        Query q,
        conn.Prepare("INSERT INTO usage_rollup VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
                     "1) ON CONFLICT (grain, start_ms, \"user\", grp, debit, node_id, gpu_class) "
                     "DO UPDATE SET gpu_milli_ms = usage_rollup.gpu_milli_ms + "
                     "excluded.gpu_milli_ms, cpu_milli_ms = usage_rollup.cpu_milli_ms + "
                     "excluded.cpu_milli_ms, cost = usage_rollup.cost + excluded.cost, charges = "
                     "usage_rollup.charges + 1"));
    const bool who = grain[0] == 'w';
    const bool day = std::string_view(grain).ends_with("-day");
    q.Bind(1, std::string(grain));
    q.Bind(2, day ? e.from_ms - e.from_ms % kDayMs : accounting::MonthOf(e.from_ms).from_ms);
    q.Bind(3, who ? e.user : "").Bind(4, who ? e.group : "").Bind(5, who ? e.debit : "");
    q.Bind(6, who ? "" : e.node_id).Bind(7, e.gpu_class);
    q.Bind(8, e.GpuMilliMs()).Bind(9, e.cpu_milli * (e.at_ms - e.from_ms)).Bind(10, e.amount);
    GP_RETURN_IF_ERROR(q.Run());
  }
  return Status::Ok();
}

}  // namespace

Result<int64_t> SqlTx::AddPrice(const PriceVersion& v) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("INSERT INTO prices (resource, gpu_class, per_unit, "
                                             "from_ms, set_by) VALUES (?1, ?2, ?3, ?4, ?5) "
                                             "RETURNING id"));
  q.Bind(1, accounting::PricedResourceName(v.resource)).Bind(2, v.gpu_class);
  q.Bind(3, v.per_unit).Bind(4, v.from_ms).Bind(5, v.set_by);
  return sql_rows::RunReturningId(q);
}

Result<std::vector<PriceVersion>> SqlTx::ListPrices() {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT id, resource, gpu_class, per_unit, from_ms, "
                                             "set_by FROM prices ORDER BY id"));
  return sql_rows::ReadAll<PriceVersion>(q, ReadPrice);
}

Result<bool> SqlTx::PostEntry(const LedgerEntry& e) {
  GP_ASSIGN_OR_RETURN(
      Query q,
      conn_.Prepare("INSERT INTO ledger (key, kind, debit, credit, amount, at_ms, attempt_id, "
                    "rank, job_id, \"user\", grp, node_id, provider_group, gpu_class, from_ms, "
                    "gpu_milli, cpu_milli, memory_mib, actor, note) VALUES (?1, ?2, ?3, ?4, ?5, "
                    "?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20) "
                    "ON CONFLICT (key) DO NOTHING"));
  q.Bind(1, e.key).Bind(2, accounting::EntryKindName(e.kind)).Bind(3, e.debit).Bind(4, e.credit);
  q.Bind(5, e.amount).Bind(6, e.at_ms).Bind(7, e.attempt_id).Bind(8, int64_t{e.rank});
  q.Bind(9, e.job_id).Bind(10, e.user).Bind(11, e.group).Bind(12, e.node_id);
  q.Bind(13, e.provider_group).Bind(14, e.gpu_class).Bind(15, e.from_ms).Bind(16, e.gpu_milli);
  q.Bind(17, e.cpu_milli).Bind(18, e.memory_mib).Bind(19, e.actor).Bind(20, e.note);
  GP_RETURN_IF_ERROR(q.Run());
  if (conn_.Changes() == 0) return false;  // the key was there
  auto move = [&](const std::string& account, accounting::Micros delta) -> Status {
    GP_ASSIGN_OR_RETURN(Query b, conn_.Prepare("INSERT INTO balances (account, balance, entries) "
                                               "VALUES (?1, ?2, 1) ON CONFLICT (account) DO "
                                               "UPDATE SET balance = balances.balance + "
                                               "excluded.balance, entries = balances.entries + 1"));
    b.Bind(1, account).Bind(2, delta);
    return b.Run();
  };
  GP_RETURN_IF_ERROR(move(e.debit, -e.amount));
  GP_RETURN_IF_ERROR(move(e.credit, e.amount));
  if (e.kind == accounting::EntryKind::kCharge) GP_RETURN_IF_ERROR(AddToRollups(conn_, e));
  return true;
}

Result<std::vector<LedgerEntry>> SqlTx::ListLedger(const LedgerQuery& lq) {
  std::string sql = std::string("SELECT ") + kLedgerColumns +
                    " FROM ledger WHERE id > ?1 AND at_ms >= ?2 AND at_ms < ?3";
  if (!lq.account.empty()) {
    // Either side, through each side's index.
    sql +=
        " AND id IN (SELECT id FROM ledger WHERE debit = ?4 AND id > ?1 UNION ALL "
        "SELECT id FROM ledger WHERE credit = ?4 AND id > ?1)";
  }
  if (lq.kind) sql += " AND kind = ?5";
  sql += " ORDER BY id LIMIT ?6";
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(sql));
  q.Bind(1, lq.after_id).Bind(2, lq.since_ms).Bind(3, lq.until_ms);
  if (!lq.account.empty()) q.Bind(4, lq.account);
  if (lq.kind) q.Bind(5, accounting::EntryKindName(*lq.kind));
  q.Bind(6, int64_t{lq.limit});
  return sql_rows::ReadAll<LedgerEntry>(q, ReadEntry);
}

Result<int64_t> SqlTx::PostedTo(const std::string& attempt_id, int32_t rank) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT coalesce(max(at_ms), 0) FROM ledger WHERE "
                                             "attempt_id = ?1 AND rank = ?2 AND kind = 'charge'"));
  q.Bind(1, attempt_id).Bind(2, int64_t{rank});
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  return row ? q.Int(0) : 0;
}

Result<std::vector<AccountBalance>> SqlTx::ListBalances() {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT account, balance, entries FROM balances "
                                             "ORDER BY account"));
  return sql_rows::ReadAll<AccountBalance>(q, ReadBalance);
}

Result<AccountBalance> SqlTx::GetBalance(const std::string& account) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT account, balance, entries FROM balances "
                                             "WHERE account = ?1"));
  q.Bind(1, account);
  GP_ASSIGN_OR_RETURN(auto found, sql_rows::ReadOne<AccountBalance>(q, ReadBalance));
  return found ? *found : AccountBalance{account, 0, 0};
}

Result<std::vector<UsageRow>> SqlTx::SumUsage(const UsageQuery& uq) {
  std::string sql;
  if (const char* grain = RollupGrain(uq)) {
    sql = std::string("SELECT ") + UsageKeySql(conn_.dialect(), uq.by, "start_ms") +
          " AS k, sum(gpu_milli_ms), sum(cpu_milli_ms), sum(cost), sum(charges) FROM "
          "usage_rollup WHERE grain = '" +
          grain + "' AND start_ms >= ?1 AND start_ms < ?2";
  } else {
    sql = std::string("SELECT ") + UsageKeySql(conn_.dialect(), uq.by, "from_ms") +
          " AS k, sum(gpu_milli * (at_ms - from_ms)), sum(cpu_milli * (at_ms - from_ms)), "
          "sum(amount), count(*) FROM ledger WHERE kind = 'charge' AND from_ms >= ?1 AND "
          "from_ms < ?2";
  }
  if (!uq.group.empty()) sql += " AND grp = ?3";
  if (!uq.user.empty()) sql += " AND \"user\" = ?4";
  if (!uq.account.empty()) sql += " AND debit = ?5";
  sql += " GROUP BY k ORDER BY k";
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(sql));
  q.Bind(1, uq.since_ms).Bind(2, uq.until_ms);
  if (!uq.group.empty()) q.Bind(3, uq.group);
  if (!uq.user.empty()) q.Bind(4, uq.user);
  if (!uq.account.empty()) q.Bind(5, uq.account);
  return sql_rows::ReadAll<UsageRow>(q, [](const Query& row) -> Result<UsageRow> {
    return UsageRow{row.Text(0), row.Int(1), row.Int(2), row.Int(3), row.Int(4)};
  });
}

Result<accounting::Micros> SqlTx::JobSpend(int64_t job_id) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT coalesce(sum(amount), 0) FROM ledger WHERE "
                                             "job_id = ?1 AND kind = 'charge'"));
  q.Bind(1, job_id);
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  return row ? q.Int(0) : 0;
}

Result<std::vector<AccountFlow>> SqlTx::AccountFlows(const std::string& account, int64_t since_ms,
                                                     int64_t until_ms) {
  // Through each side's index (ledger_debit, ledger_credit).
  GP_ASSIGN_OR_RETURN(
      Query q, conn_.Prepare("SELECT from_ms - from_ms % 86400000 AS d, kind, sum(CASE WHEN "
                             "credit = ?1 THEN amount ELSE 0 END), sum(CASE WHEN debit = ?1 THEN "
                             "amount ELSE 0 END), count(*) FROM ledger WHERE id IN (SELECT id "
                             "FROM ledger WHERE debit = ?1 UNION ALL SELECT id FROM ledger WHERE "
                             "credit = ?1) AND from_ms >= ?2 AND from_ms < ?3 GROUP BY d, kind"));
  q.Bind(1, account).Bind(2, since_ms).Bind(3, until_ms);
  GP_ASSIGN_OR_RETURN(auto out, sql_rows::ReadAll<AccountFlow>(q, ReadFlow));
  // By day, then kind as the enum orders them (SQL ordered the names).
  std::sort(out.begin(), out.end(), [](const AccountFlow& a, const AccountFlow& b) {
    return std::pair(a.day_ms, a.kind) < std::pair(b.day_ms, b.kind);
  });
  return out;
}

Status SqlTx::PutBudget(const accounting::Budget& b) {
  GP_ASSIGN_OR_RETURN(Query q,
                      conn_.Prepare(sql_rows::UpsertSql(
                          "budgets", "account, monthly, action, set_ms, set_by", "account")));
  q.Bind(1, b.account).Bind(2, b.monthly).Bind(3, accounting::BudgetActionName(b.action));
  q.Bind(4, b.set_ms).Bind(5, b.set_by);
  return q.Run();
}

Status SqlTx::DeleteBudget(const std::string& account) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("DELETE FROM budgets WHERE account = ?1"));
  q.Bind(1, account);
  return q.Run();
}

Result<std::vector<accounting::Budget>> SqlTx::ListBudgets() {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT account, monthly, action, set_ms, set_by "
                                             "FROM budgets ORDER BY account"));
  std::vector<accounting::Budget> out;
  while (true) {
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    accounting::Budget b;
    b.account = q.Text(0);
    b.monthly = q.Int(1);
    GP_ASSIGN_OR_RETURN(b.action, accounting::ParseBudgetAction(q.Text(2)));
    b.set_ms = q.Int(3);
    b.set_by = q.Text(4);
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace gpupool
