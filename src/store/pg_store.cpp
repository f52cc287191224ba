#include "store/pg_store.h"

#include <libpq-fe.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/pg_handles.h"
#include "store/pg_schema.h"
#include "store/sql_query.h"
#include "store/sql_tx.h"

namespace gpupool {

namespace {

// SQLSTATE classes the caller may retry: a lost connection (08), a
// serialization failure or deadlock (40), a lock not available (55P03), a
// statement cancelled (57014), the server shutting down (57P01..57P03).
bool Retryable(std::string_view state) {
  return state.starts_with("08") || state.starts_with("40") || state == "55P03" ||
         state == "57014" || state.starts_with("57P");
}

Status PgError(PGconn* conn, const PGresult* r, std::string_view what) {
  const char* state = r != nullptr ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  std::string message = r != nullptr ? PQresultErrorMessage(r) : PQerrorMessage(conn);
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) {
    message.pop_back();
  }
  std::string text = "postgres: " + std::string(what) + ": " + message;
  if (state != nullptr) text += " (SQLSTATE " + std::string(state) + ")";
  if (PQstatus(conn) != CONNECTION_OK || (state != nullptr && Retryable(state))) {
    return Status::Unavailable(text);
  }
  return Status::Internal(text);
}

// The neutral SQL's parameters (?N, or ? numbered after the last) as
// PostgreSQL's $1..$K, numbered densely in order of N (PostgreSQL must know
// every parameter's type, so one the SQL never names cannot be left in a
// gap); `dense[N]` is N's position, -1 for a number not named.
std::string Translate(std::string_view sql, std::vector<int>& dense) {
  std::vector<std::pair<size_t, size_t>> spans;  // of each ?N in sql
  std::vector<int> numbers;
  int last = 0;
  char quote = 0;
  for (size_t i = 0; i < sql.size(); ++i) {
    char c = sql[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      continue;
    }
    if (c != '?') continue;
    size_t j = i + 1;
    int n = 0;
    while (j < sql.size() && sql[j] >= '0' && sql[j] <= '9') n = n * 10 + (sql[j++] - '0');
    if (j == i + 1) n = last + 1;
    last = n;
    spans.emplace_back(i, j);
    numbers.push_back(n);
  }
  const int top = numbers.empty() ? 0 : *std::max_element(numbers.begin(), numbers.end());
  dense.assign(static_cast<size_t>(top) + 1, -1);
  for (int n : numbers) dense[static_cast<size_t>(n)] = 0;
  int k = 0;
  for (int& d : dense) {
    if (d == 0) d = k++;
  }
  std::string out;
  size_t at = 0;
  for (size_t s = 0; s < spans.size(); ++s) {
    out.append(sql.substr(at, spans[s].first - at));
    out += "$" + std::to_string(dense[static_cast<size_t>(numbers[s])] + 1);
    at = spans[s].second;
  }
  out.append(sql.substr(at));
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return 0;
}

}  // namespace

class PgConn;

// A statement prepared on the server (PQprepare), run with text parameters
// (bytea ones binary) and read as text.
class PgStatement final : public SqlStatement {
 public:
  PgStatement(PgConn& conn, std::string name, std::string sql, std::vector<int> dense)
      : conn_(conn), name_(std::move(name)), sql_(std::move(sql)), dense_(std::move(dense)) {
    const size_t n = dense_.empty()
                         ? 0
                         : static_cast<size_t>(*std::max_element(dense_.begin(), dense_.end()) + 1);
    values_.resize(n);
    null_.assign(n, true);
    binary_.assign(n, 0);
  }

  void BindInt(int i, int64_t v) override { Set(i, std::to_string(v), false); }
  void BindText(int i, std::string_view v) override { Set(i, std::string(v), false); }
  void BindNull(int i) override {
    if (int d = Slot(i); d >= 0) null_[static_cast<size_t>(d)] = true;
  }
  void BindDouble(int i, double v) override {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    Set(i, buf, false);
  }
  void BindBlob(int i, std::string_view v) override { Set(i, std::string(v), true); }

  Result<bool> Step() override;
  void Reset() override {
    result_.reset();
    row_ = -1;
    violated_ = SqlConstraint::kNone;
    std::fill(null_.begin(), null_.end(), true);
    std::fill(binary_.begin(), binary_.end(), 0);
  }
  bool IsNull(int col) const override { return PQgetisnull(result_.get(), row_, col) != 0; }
  int64_t Int(int col) const override {
    const char* v = PQgetvalue(result_.get(), row_, col);
    if (v[0] == 't' && v[1] == '\0') return 1;  // a boolean
    if (v[0] == 'f' && v[1] == '\0') return 0;
    return std::strtoll(v, nullptr, 10);
  }
  double Double(int col) const override {
    return std::strtod(PQgetvalue(result_.get(), row_, col), nullptr);
  }
  std::string Text(int col) const override {
    return std::string(PQgetvalue(result_.get(), row_, col),
                       static_cast<size_t>(PQgetlength(result_.get(), row_, col)));
  }
  std::string Blob(int col) const override {
    std::string text = Text(col);
    constexpr Oid kBytea = 17;
    if (PQftype(result_.get(), col) != kBytea || !text.starts_with("\\x")) return text;
    std::string out((text.size() - 2) / 2, '\0');
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = static_cast<char>(HexValue(text[2 + 2 * i]) << 4 | HexValue(text[3 + 2 * i]));
    }
    return out;
  }
  SqlConstraint violated() const override { return violated_; }

 private:
  int Slot(int i) const {
    return i >= 0 && static_cast<size_t>(i) < dense_.size() ? dense_[static_cast<size_t>(i)] : -1;
  }
  void Set(int i, std::string v, bool binary) {
    int d = Slot(i);
    if (d < 0) return;  // a parameter this statement does not name
    values_[static_cast<size_t>(d)] = std::move(v);
    null_[static_cast<size_t>(d)] = false;
    binary_[static_cast<size_t>(d)] = binary ? 1 : 0;
  }

  PgConn& conn_;
  std::string name_, sql_;
  std::vector<int> dense_;
  std::vector<std::string> values_;
  std::vector<bool> null_;
  std::vector<int> binary_;
  PgResultPtr result_;
  int row_ = -1;
  SqlConstraint violated_ = SqlConstraint::kNone;
};

class PgConn final : public SqlConn {
 public:
  PGconn* raw = nullptr;
  int64_t changes = 0;

  ~PgConn() override {
    cache_.clear();
    if (raw != nullptr) PQfinish(raw);
  }

  Result<Query> Prepare(std::string_view sql) override {
    auto it = cache_.find(sql);
    if (it == cache_.end()) {
      std::vector<int> dense;
      std::string translated = Translate(sql, dense);
      std::string name = "s" + std::to_string(++prepared_);
      const int n = dense.empty() ? 0 : *std::max_element(dense.begin(), dense.end()) + 1;
      PgResultPtr r(PQprepare(raw, name.c_str(), translated.c_str(), n, nullptr));
      if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) {
        return PgError(raw, r.get(), "prepare " + std::string(sql));
      }
      it = cache_
               .emplace(std::string(sql),
                        std::make_unique<PgStatement>(*this, name, translated, std::move(dense)))
               .first;
    }
    return Query(it->second.get());
  }
  int64_t Changes() override { return changes; }
  SqlDialect dialect() const override { return SqlDialect::kPostgres; }

  // Runs SQL without parameters (transaction control, schema steps).
  Status Exec(const std::string& sql, std::string_view what) {
    PgResultPtr r(PQexec(raw, sql.c_str()));
    ExecStatusType st = PQresultStatus(r.get());
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return PgError(raw, r.get(), what);
    // COMMIT of a transaction in which a statement failed rolls it back
    // and says so only in its command tag.
    if (sql == "COMMIT" && std::string_view(PQcmdStatus(r.get())) != "COMMIT") {
      return Status::Internal(
          "postgres: the transaction was rolled back at commit (a statement "
          "in it had failed)");
    }
    return Status::Ok();
  }

  // After a lost connection: connect again; statements are prepared anew.
  Status Reconnect() {
    cache_.clear();
    PQreset(raw);
    if (PQstatus(raw) != CONNECTION_OK) {
      return Status::Unavailable("postgres: cannot reconnect: " + std::string(PQerrorMessage(raw)));
    }
    return Status::Ok();
  }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::unique_ptr<PgStatement>, Hash, std::equal_to<>> cache_;
  int64_t prepared_ = 0;
};

Result<bool> PgStatement::Step() {
  if (row_ < 0 && result_ == nullptr) {
    std::vector<const char*> values(values_.size());
    std::vector<int> lengths(values_.size());
    for (size_t i = 0; i < values_.size(); ++i) {
      values[i] = null_[i] ? nullptr : values_[i].c_str();
      lengths[i] = static_cast<int>(values_[i].size());
    }
    result_.reset(PQexecPrepared(conn_.raw, name_.c_str(), static_cast<int>(values.size()),
                                 values.data(), lengths.data(), binary_.data(), 0));
    ExecStatusType st = PQresultStatus(result_.get());
    if (st == PGRES_COMMAND_OK) {
      conn_.changes = std::atoll(PQcmdTuples(result_.get()));
      return false;
    }
    if (st != PGRES_TUPLES_OK) {
      const char* state = PQresultErrorField(result_.get(), PG_DIAG_SQLSTATE);
      std::string_view s = state != nullptr ? state : "";
      violated_ = s == "23503"          ? SqlConstraint::kForeignKey
                  : s == "23505"        ? SqlConstraint::kUnique
                  : s.starts_with("23") ? SqlConstraint::kOther
                                        : SqlConstraint::kNone;
      Status err = PgError(conn_.raw, result_.get(), sql_);
      result_.reset();
      return err;
    }
    conn_.changes = std::atoll(PQcmdTuples(result_.get()));
  }
  if (result_ == nullptr) return false;
  ++row_;
  return row_ < PQntuples(result_.get());
}

struct PgStore::Impl {
  PgConn conn;
  PgOptions options;
  bool in_tx = false;
  bool broken = false;  // the connection was lost: reconnect before the next transaction
};

int PgStore::SchemaVersion() { return PgSchemaSteps().back().version; }

std::string PgStore::Redacted(const std::string& url) {
  // URL form: scheme://user:password@host...; key=value form: password=...
  std::string out = url;
  if (size_t scheme = out.find("://"); scheme != std::string::npos) {
    size_t at = out.find('@', scheme);
    size_t colon = out.find(':', scheme + 3);
    if (at != std::string::npos && colon != std::string::npos && colon < at) {
      out.replace(colon + 1, at - colon - 1, "***");
    }
  }
  if (size_t p = out.find("password="); p != std::string::npos) {
    size_t end = out.find_first_of(" &", p);
    out.replace(p + 9, (end == std::string::npos ? out.size() : end) - p - 9, "***");
  }
  return out;
}

namespace {

// The schema's version table, the leader row and the list of servers live
// beside the store's tables, outside its versioned steps.
constexpr const char* kBookkeeping =
    "CREATE TABLE IF NOT EXISTS gpupool_schema (id BIGINT PRIMARY KEY CHECK (id = 1), "
    "version BIGINT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS gpupool_leader (id BIGINT PRIMARY KEY CHECK (id = 1), "
    "epoch BIGINT NOT NULL, holder TEXT NOT NULL, address TEXT NOT NULL, "
    "expires_at TIMESTAMPTZ NOT NULL);"
    "INSERT INTO gpupool_leader VALUES (1, 0, '', '', 'epoch') ON CONFLICT (id) DO NOTHING;"
    "CREATE TABLE IF NOT EXISTS gpupool_servers (id TEXT PRIMARY KEY, address TEXT NOT NULL, "
    "version TEXT NOT NULL, started_at TIMESTAMPTZ NOT NULL, seen_at TIMESTAMPTZ NOT NULL);";

// A fixed key for pg_advisory_xact_lock: migrations run one at a time.
constexpr int64_t kMigrationLock = 0x67707570'6f6f6c31;  // "gpupool1"

Status Migrate(PgConn& conn) {
  GP_RETURN_IF_ERROR(conn.Exec("BEGIN", "begin"));
  auto body = [&]() -> Status {
    GP_RETURN_IF_ERROR(
        conn.Exec("SELECT pg_advisory_xact_lock(" + std::to_string(kMigrationLock) + ")",
                  "lock for migration"));
    GP_RETURN_IF_ERROR(conn.Exec(kBookkeeping, "create bookkeeping tables"));
    GP_ASSIGN_OR_RETURN(Query q, conn.Prepare("SELECT version FROM gpupool_schema WHERE id = 1"));
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    const int64_t have = row ? q.Int(0) : 0;
    const int want = PgStore::SchemaVersion();
    if (have > want) {
      return Status::FailedPrecondition(
          "the database's schema is version " + std::to_string(have) +
          ", newer than this binary's (version " + std::to_string(want) +
          "): run a gpupool at least as new as the one that wrote it");
    }
    for (const PgSchemaStep& step : PgSchemaSteps()) {
      if (step.version <= have) continue;  // the first creates everything on an empty schema
      GP_RETURN_IF_ERROR(conn.Exec(step.sql, "schema step " + std::to_string(step.version)));
    }
    if (have < want) {
      GP_ASSIGN_OR_RETURN(Query up, conn.Prepare("INSERT INTO gpupool_schema VALUES (1, ?1) ON "
                                                 "CONFLICT (id) DO UPDATE SET version = "
                                                 "excluded.version"));
      up.Bind(1, int64_t{want});
      GP_RETURN_IF_ERROR(up.Run());
    }
    return Status::Ok();
  };
  Status st = body();
  if (!st.ok()) {
    (void)conn.Exec("ROLLBACK", "rollback");
    return st;
  }
  return conn.Exec("COMMIT", "commit the schema");
}

}  // namespace

namespace {

PGconn* ConnectWith(PGconn* (*connect)(const char* const*, const char* const*, int),
                    const std::string& url, int64_t unanswered_ms) {
  const std::string unanswered = std::to_string(unanswered_ms);
  const char* keys[] = {"connect_timeout", "tcp_user_timeout", "dbname", nullptr};
  const char* values[] = {"5", unanswered.c_str(), url.c_str(), nullptr};
  // expand_dbname: the URL (or key=value string) is read as a connection
  // string whose settings override the earlier ones.
  return connect(keys, values, 1);
}

}  // namespace

PGconn* PgStore::Connect(const std::string& url, int64_t unanswered_ms) {
  return ConnectWith(PQconnectdbParams, url, unanswered_ms);
}

PGconn* PgStore::StartConnect(const std::string& url, int64_t unanswered_ms) {
  return ConnectWith(PQconnectStartParams, url, unanswered_ms);
}

Result<std::unique_ptr<PgStore>> PgStore::Open(const std::string& url, const PgOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->conn.raw = Connect(url);
  if (impl->conn.raw == nullptr || PQstatus(impl->conn.raw) != CONNECTION_OK) {
    std::string why = impl->conn.raw != nullptr ? PQerrorMessage(impl->conn.raw) : "out of memory";
    while (!why.empty() && why.back() == '\n') why.pop_back();
    return Status::Unavailable("cannot connect to PostgreSQL at " + Redacted(url) + ": " + why);
  }
  if (PQserverVersion(impl->conn.raw) < 150000) {
    return Status::FailedPrecondition("PostgreSQL at " + Redacted(url) + " is version " +
                                      std::to_string(PQserverVersion(impl->conn.raw)) +
                                      "; gpupool needs 15 or newer");
  }
  GP_RETURN_IF_ERROR(
      impl->conn.Exec("SET client_min_messages = warning; SET TIME ZONE 'UTC'", "settings"));
  GP_RETURN_IF_ERROR(Migrate(impl->conn));
  return std::unique_ptr<PgStore>(new PgStore(std::move(impl)));
}

PgStore::PgStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PgStore::~PgStore() = default;

Status PgStore::Transact(const std::function<Status(Tx&)>& fn) {
  if (impl_->in_tx) {
    return Status::FailedPrecondition(
        "Store::Transact called inside another transaction (nested transactions are not "
        "supported)");
  }
  PgConn& conn = impl_->conn;
  if (impl_->broken || PQstatus(conn.raw) != CONNECTION_OK) {
    GP_RETURN_IF_ERROR(conn.Reconnect());
    GP_RETURN_IF_ERROR(
        conn.Exec("SET client_min_messages = warning; SET TIME ZONE 'UTC'", "settings"));
    impl_->broken = false;
  }
  auto failed = [&](Status st) {
    if (PQstatus(conn.raw) != CONNECTION_OK) impl_->broken = true;
    if (PQtransactionStatus(conn.raw) != PQTRANS_IDLE) (void)conn.Exec("ROLLBACK", "rollback");
    return st;
  };
  if (Status st = conn.Exec("BEGIN", "begin"); !st.ok()) return failed(st);
  if (impl_->options.fence_epoch) {
    const int64_t mine = impl_->options.fence_epoch();
    auto q = conn.Prepare("SELECT epoch FROM gpupool_leader WHERE id = 1 FOR SHARE");
    if (!q.ok()) return failed(q.status());
    auto row = q->Step();
    if (!row.ok()) return failed(row.status());
    const int64_t current = *row ? q->Int(0) : -1;
    if (current != mine) {
      return failed(Status::FailedPrecondition(
          "deposed: this server led in epoch " + std::to_string(mine) +
          ", the database is in epoch " + std::to_string(current) + "; nothing was written"));
    }
  }
  impl_->in_tx = true;
  SqlTx tx(conn);
  Status st;
  try {
    st = fn(tx);
  } catch (...) {
    impl_->in_tx = false;
    (void)failed(Status::Ok());
    throw;
  }
  impl_->in_tx = false;
  if (!st.ok()) return failed(st);
  if (Status commit = conn.Exec("COMMIT", "commit"); !commit.ok()) {
    return failed(commit.WithContext("commit"));
  }
  return Status::Ok();
}

}  // namespace gpupool
