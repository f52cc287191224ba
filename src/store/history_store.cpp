#include "store/history_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "common/clock.h"
#include "store/sqlite_query.h"

namespace gpupool {
namespace {

namespace fs = std::filesystem;
using telemetry::GpuBucket;
using telemetry::GpuPoint;
using telemetry::PoolBucket;
using telemetry::PoolPoint;
using telemetry::Tier;

// PRAGMA user_version of the schema below; a file of a higher version was
// written by a newer gpupool.
constexpr int kHistorySchemaVersion = 1;

constexpr const char* kHistorySchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gpu_points (
  tier      INTEGER NOT NULL,
  node      TEXT NOT NULL,
  gpu       INTEGER NOT NULL,
  t_ms      INTEGER NOT NULL,
  samples   INTEGER NOT NULL,
  util      REAL,
  util_max  REAL,
  mem       REAL,
  mem_max   REAL,
  mem_total REAL,
  temp      REAL,
  power     REAL,
  energy    REAL,
  alloc     REAL,
  PRIMARY KEY (tier, node, gpu, t_ms)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pool_points (
  tier            INTEGER NOT NULL,
  t_ms            INTEGER NOT NULL,
  samples         INTEGER NOT NULL,
  gpus            REAL,
  gpus_reporting  REAL,
  allocated_gpus  REAL,
  utilization_sum REAL,
  power           REAL,
  jobs_running    REAL,
  jobs_pending    REAL,
  nodes_connected REAL,
  PRIMARY KEY (tier, t_ms)
) WITHOUT ROWID;
)sql";

// A size-bound batch deletes about this fraction of a tier's span: few
// enough rounds to get under the bound, small enough not to overshoot much.
constexpr int64_t kSizeBatchDivisor = 8;

bool IsUnusable(const Status& s) { return s.code() == StatusCode::kDataLoss; }

std::string TiersText(const std::vector<Tier>& tiers) {
  std::string out;
  for (const Tier& t : tiers) {
    if (!out.empty()) out += ",";
    out += std::to_string(t.step_ms) + ":" + std::to_string(t.keep_ms);
  }
  return out;
}

// The steps of TiersText's "step:keep,..." (those that parse).
std::vector<int64_t> StepsOf(const std::string& text) {
  std::vector<int64_t> steps;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    char* stop = nullptr;
    long long step = std::strtoll(item.c_str(), &stop, 10);
    if (stop != item.c_str() && *stop == ':') steps.push_back(step);
    pos = end + 1;
  }
  return steps;
}

// Renames `path` and its -wal and -shm files to `<path>.damaged-<ms>`
// (counting up past a name in use); returns the new name.
Result<std::string> MoveAside(const std::string& path) {
  int64_t ms = RealClock().NowMs();
  std::error_code ec;
  std::string aside;
  do {
    aside = path + ".damaged-" + std::to_string(ms++);
  } while (fs::exists(aside, ec));
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::string from = path + suffix;
    if (!fs::exists(from, ec)) continue;
    fs::rename(from, aside + suffix, ec);
    if (ec) {
      return Status::Internal("cannot move the damaged telemetry history " + from + " to " + aside +
                              suffix + ": " + ec.message());
    }
  }
  return aside;
}

}  // namespace

// ---------------------------------------------------------------------------

struct HistoryStore::Impl {
  DbPtr db;
  // Declared after db so statements are finalized before the connection closes.
  StatementCache cache;
  HistoryOptions options;
  std::string warning;
  // The newest time seen (a written bucket's end, a Prune's now): queries
  // count a tier's keep back from it.
  int64_t latest_ms = 0;
  // Per tier step: the tier has no points before this, though its keep
  // reaches further back: the size bound cut them, or the tier was added
  // (tiers changed) then. Queries read such a range from a coarser tier.
  std::map<int64_t, int64_t> missing_before;

  Result<Query> Prepare(std::string_view sql) { return cache.Prepare(db.get(), sql); }

  // Multi-statement SQL or a PRAGMA that must be stepped to its end, unprepared.
  Status Exec(const std::string& sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(db.get(), sql.c_str(), nullptr, nullptr, &err);
    if (rc == SQLITE_OK) return Status::Ok();
    Status s = SqliteError(db.get(), rc, sql.substr(0, 60));
    sqlite3_free(err);
    return s;
  }

  // The first column of a one-row statement.
  Result<int64_t> Scalar(std::string_view sql) {
    GP_ASSIGN_OR_RETURN(Query q, Prepare(sql));
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return Status::Internal("sqlite: " + std::string(sql) + ": no result");
    return q.Int(0);
  }

  Status RollbackIfActive() {
    if (sqlite3_get_autocommit(db.get()) != 0) return Status::Ok();
    return Exec("ROLLBACK");
  }

  // BEGIN IMMEDIATE, fn, COMMIT; ROLLBACK when fn or the commit fails.
  Status InTransaction(const std::function<Status()>& fn) {
    GP_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Status st = fn();
    if (st.ok()) st = Exec("COMMIT");
    if (!st.ok()) (void)RollbackIfActive();
    return st;
  }

  Result<int64_t> Bytes() {
    GP_ASSIGN_OR_RETURN(int64_t pages, Scalar("PRAGMA page_count"));
    GP_ASSIGN_OR_RETURN(int64_t free_pages, Scalar("PRAGMA freelist_count"));
    GP_ASSIGN_OR_RETURN(int64_t page_size, Scalar("PRAGMA page_size"));
    return (pages - free_pages) * page_size;
  }

  Status SetMeta(const std::string& key, const std::string& value) {
    GP_ASSIGN_OR_RETURN(Query q,
                        Prepare("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)"));
    return q.Bind(1, key).Bind(2, value).Run();
  }

  Result<std::optional<std::string>> GetMeta(const std::string& key) {
    GP_ASSIGN_OR_RETURN(Query q, Prepare("SELECT value FROM meta WHERE key = ?1"));
    q.Bind(1, key);
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return std::optional<std::string>();
    return std::optional<std::string>(q.Text(0));
  }

  // Calls fn(node, gpu) for each GPU with points in the tier (of `node`
  // only, unless it is empty), in order. One index probe per GPU: the
  // primary key starts (tier, node, gpu), so the GPUs are found by skipping
  // from one to the next rather than by reading every point.
  Status ForEachGpu(int64_t tier, const std::string& node,
                    const std::function<Status(const std::string&, int32_t)>& fn) {
    std::string cur_node = node;
    int64_t cur_gpu = std::numeric_limits<int64_t>::min();
    while (true) {
      std::string next_node;
      int64_t next_gpu = 0;
      {
        GP_ASSIGN_OR_RETURN(
            Query q, node.empty() ? Prepare("SELECT node, gpu FROM gpu_points WHERE tier = ?1 AND "
                                            "(node, gpu) > (?2, ?3) ORDER BY node, gpu LIMIT 1")
                                  : Prepare("SELECT node, gpu FROM gpu_points WHERE tier = ?1 AND "
                                            "node = ?2 AND gpu > ?3 ORDER BY gpu LIMIT 1"));
        q.Bind(1, tier).Bind(2, cur_node).Bind(3, cur_gpu);
        GP_ASSIGN_OR_RETURN(bool row, q.Step());
        if (!row) return Status::Ok();
        next_node = q.Text(0);
        next_gpu = q.Int(1);
      }
      GP_RETURN_IF_ERROR(fn(next_node, static_cast<int32_t>(next_gpu)));
      cur_node = std::move(next_node);
      cur_gpu = next_gpu;
    }
  }

  // Deletes the tier's points (GPUs and pool) before `cutoff_ms`.
  Status DeleteBefore(int64_t tier, int64_t cutoff_ms) {
    GP_RETURN_IF_ERROR(ForEachGpu(tier, "", [&](const std::string& node, int32_t gpu) -> Status {
      GP_ASSIGN_OR_RETURN(Query q, Prepare("DELETE FROM gpu_points WHERE tier = ?1 AND node = ?2 "
                                           "AND gpu = ?3 AND t_ms < ?4"));
      return q.Bind(1, tier).Bind(2, node).Bind(3, gpu).Bind(4, cutoff_ms).Run();
    }));
    GP_ASSIGN_OR_RETURN(Query q, Prepare("DELETE FROM pool_points WHERE tier = ?1 AND t_ms < ?2"));
    return q.Bind(1, tier).Bind(2, cutoff_ms).Run();
  }

  // The first t_ms of a query of (tier, node, gpu) or (tier) ordered by
  // t_ms with LIMIT 1: an index probe, not a scan.
  Result<std::optional<int64_t>> Edge(std::string_view sql, int64_t tier, const std::string* node,
                                      int32_t gpu) {
    GP_ASSIGN_OR_RETURN(Query q, Prepare(sql));
    q.Bind(1, tier);
    if (node != nullptr) q.Bind(2, *node).Bind(3, gpu);
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return std::optional<int64_t>();
    return std::optional<int64_t>(q.Int(0));
  }

  // The oldest and newest point of the tier; nullopt when it has none.
  Result<std::optional<std::pair<int64_t, int64_t>>> Span(int64_t tier) {
    std::optional<std::pair<int64_t, int64_t>> span;
    auto widen = [&](const std::optional<int64_t>& lo, const std::optional<int64_t>& hi) {
      if (!lo || !hi) return;
      if (!span) span.emplace(*lo, *hi);
      span->first = std::min(span->first, *lo);
      span->second = std::max(span->second, *hi);
    };
    constexpr std::string_view kGpuFirst =
        "SELECT t_ms FROM gpu_points WHERE tier = ?1 AND node = ?2 AND gpu = ?3 ORDER BY t_ms "
        "LIMIT 1";
    constexpr std::string_view kGpuLast =
        "SELECT t_ms FROM gpu_points WHERE tier = ?1 AND node = ?2 AND gpu = ?3 ORDER BY t_ms "
        "DESC LIMIT 1";
    GP_RETURN_IF_ERROR(ForEachGpu(tier, "", [&](const std::string& node, int32_t gpu) -> Status {
      GP_ASSIGN_OR_RETURN(std::optional<int64_t> lo, Edge(kGpuFirst, tier, &node, gpu));
      GP_ASSIGN_OR_RETURN(std::optional<int64_t> hi, Edge(kGpuLast, tier, &node, gpu));
      widen(lo, hi);
      return Status::Ok();
    }));
    GP_ASSIGN_OR_RETURN(std::optional<int64_t> lo,
                        Edge("SELECT t_ms FROM pool_points WHERE tier = ?1 ORDER BY t_ms LIMIT 1",
                             tier, nullptr, 0));
    GP_ASSIGN_OR_RETURN(std::optional<int64_t> hi,
                        Edge("SELECT t_ms FROM pool_points WHERE tier = ?1 ORDER BY t_ms DESC "
                             "LIMIT 1",
                             tier, nullptr, 0));
    widen(lo, hi);
    return span;
  }

  Status Configure(const std::string& path);
  Status LoadMeta();
  Status PruneBySize(bool* deleted);
  Status PlanQuery(int64_t since_ms, int64_t until_ms, int64_t step_ms, int64_t* tier_step,
                   int64_t* used_step);
  Result<std::vector<GpuPoint>> ReadGpu(int64_t tier, const std::string& node, int32_t gpu,
                                        int64_t since_ms, int64_t until_ms);
};

// Checks the file, sets the connection up and creates the schema. DataLoss
// when the file cannot be used as a history (damaged, not a database, a
// newer schema): Open moves it aside.
Status HistoryStore::Impl::Configure(const std::string& path) {
  const bool in_memory = path == ":memory:";
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  db.reset(raw);  // closed on every path, even when the open failed
  if (rc != SQLITE_OK) return SqliteError(raw, rc, "open " + path);
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, 5000);

  {
    GP_ASSIGN_OR_RETURN(Query q, Prepare("PRAGMA quick_check(10)"));
    std::string problems;
    while (true) {
      GP_ASSIGN_OR_RETURN(bool row, q.Step());  // damage bad enough stops it: DataLoss too
      if (!row) break;
      if (std::string line = q.Text(0); line != "ok") problems += "\n  " + line;
    }
    if (!problems.empty()) return Status::DataLoss("PRAGMA quick_check:" + problems);
  }
  GP_ASSIGN_OR_RETURN(int64_t version, Scalar("PRAGMA user_version"));
  if (version > kHistorySchemaVersion) {
    return Status::DataLoss("written by a newer gpupool (schema version " +
                            std::to_string(version) + ", this one reads " +
                            std::to_string(kHistorySchemaVersion) + ")");
  }
  if (version == 0) {
    // Not ours yet: refuse a database of other tables rather than write into
    // it or move it away (it may be someone's data, given the wrong path).
    GP_ASSIGN_OR_RETURN(int64_t tables, Scalar("SELECT COUNT(*) FROM sqlite_master"));
    if (tables > 0) {
      return Status::FailedPrecondition(
          path +
          " is a SQLite database but not a telemetry history; move it or point the "
          "history elsewhere");
    }
    // Only takes effect before the first table is created.
    GP_RETURN_IF_ERROR(Exec("PRAGMA auto_vacuum = INCREMENTAL"));
  }
  if (!in_memory) {
    GP_ASSIGN_OR_RETURN(Query q, Prepare("PRAGMA journal_mode = WAL"));
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row || q.Text(0) != "wal") {
      return Status::Internal("sqlite: " + path + ": cannot enable WAL mode");
    }
  }
  GP_RETURN_IF_ERROR(
      Exec(options.fsync ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL"));
  GP_RETURN_IF_ERROR(Exec("PRAGMA temp_store = MEMORY"));
  // The WAL is truncated back to this after a checkpoint that followed a burst.
  GP_RETURN_IF_ERROR(Exec("PRAGMA journal_size_limit = 16777216"));
  return InTransaction([&] {
    GP_RETURN_IF_ERROR(Exec(kHistorySchema));
    return Exec("PRAGMA user_version = " + std::to_string(kHistorySchemaVersion));
  });
}

// Reconciles the stored tiers with the options' and loads what queries use.
Status HistoryStore::Impl::LoadMeta() {
  return InTransaction([&]() -> Status {
    GP_ASSIGN_OR_RETURN(std::optional<std::string> latest, GetMeta("latest_ms"));
    if (latest) latest_ms = std::stoll(*latest);
    for (const Tier& t : options.tiers) {
      GP_ASSIGN_OR_RETURN(std::optional<std::string> cut,
                          GetMeta("missing_before:" + std::to_string(t.step_ms)));
      if (cut) missing_before[t.step_ms] = std::stoll(*cut);
    }
    const std::string now_tiers = TiersText(options.tiers);
    GP_ASSIGN_OR_RETURN(std::optional<std::string> was_tiers, GetMeta("tiers"));
    if (was_tiers && *was_tiers != now_tiers) {
      std::vector<int64_t> was_steps = StepsOf(*was_tiers);
      std::string kept;
      for (const Tier& t : options.tiers) {
        kept += (kept.empty() ? "" : ", ") + std::to_string(t.step_ms);
        // A tier new to this file has nothing from before now.
        if (std::find(was_steps.begin(), was_steps.end(), t.step_ms) == was_steps.end()) {
          missing_before[t.step_ms] = latest_ms;
        }
      }
      int64_t deleted = 0;
      for (const char* table : {"gpu_points", "pool_points"}) {
        GP_RETURN_IF_ERROR(
            Exec(std::string("DELETE FROM ") + table + " WHERE tier NOT IN (" + kept + ")"));
        deleted += sqlite3_changes64(db.get());
      }
      GP_RETURN_IF_ERROR(Exec("DELETE FROM meta WHERE key LIKE 'missing_before:%'"));
      for (const auto& [step, t] : missing_before) {
        GP_RETURN_IF_ERROR(SetMeta("missing_before:" + std::to_string(step), std::to_string(t)));
      }
      warning = "telemetry history tiers changed from " + *was_tiers + " to " + now_tiers +
                " (step_ms:keep_ms): deleted " + std::to_string(deleted) +
                " points of tiers no longer kept";
    }
    return SetMeta("tiers", now_tiers);
  });
}

// ---------------------------------------------------------------------------

HistoryStore::HistoryStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HistoryStore::~HistoryStore() = default;

const std::string& HistoryStore::warning() const { return impl_->warning; }

Result<std::unique_ptr<HistoryStore>> HistoryStore::Open(const std::string& path,
                                                         HistoryOptions options) {
  GP_RETURN_IF_ERROR(telemetry::ValidateTiers(options.tiers).WithContext("history options"));
  if (options.max_bytes <= 0) {
    return Status::InvalidArgument("history options: max_bytes: must be positive (is " +
                                   std::to_string(options.max_bytes) + ")");
  }
  if (path != ":memory:") {
    fs::path parent = fs::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (ec) {
      return Status::Unavailable("cannot create directory " + parent.string() + ": " +
                                 ec.message());
    }
  }

  auto open = [&]() -> Result<std::unique_ptr<Impl>> {
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    GP_RETURN_IF_ERROR(impl->Configure(path));
    GP_RETURN_IF_ERROR(impl->LoadMeta());
    return impl;
  };
  auto impl = open();
  std::string moved;
  if (!impl.ok() && IsUnusable(impl.status()) && path != ":memory:") {
    // The failed connection is closed (impl holds only the error), so the
    // files can be renamed.
    GP_ASSIGN_OR_RETURN(std::string aside, MoveAside(path));
    moved = "telemetry history " + path + " could not be used (" + impl.status().message() +
            "): moved it aside to " + aside + " and started a fresh history";
    impl = open();
  }
  if (!impl.ok()) return impl.status().WithContext("telemetry history " + path);
  if (!moved.empty()) {
    (*impl)->warning = (*impl)->warning.empty() ? moved : moved + "; " + (*impl)->warning;
  }
  return std::unique_ptr<HistoryStore>(new HistoryStore(std::move(impl).value()));
}

Result<int64_t> HistoryStore::Bytes() { return impl_->Bytes(); }

Status HistoryStore::Write(const telemetry::Downsampler::Flushed& f) {
  const std::vector<Tier>& tiers = impl_->options.tiers;
  // Checked before anything is written: a Downsampler of other tiers would
  // file points under the wrong step.
  auto tier_step = [&](int tier, int64_t t_ms) -> Result<int64_t> {
    if (tier < 0 || tier >= static_cast<int>(tiers.size())) {
      return Status::InvalidArgument("tier " + std::to_string(tier) + ": the history has " +
                                     std::to_string(tiers.size()) + " tiers");
    }
    int64_t step = tiers[static_cast<size_t>(tier)].step_ms;
    if (telemetry::BucketStart(t_ms, step) != t_ms) {
      return Status::InvalidArgument("point at " + std::to_string(t_ms) + " of tier " +
                                     std::to_string(tier) + " is not on its " +
                                     std::to_string(step) + " ms step (other tiers?)");
    }
    return step;
  };
  int64_t latest = impl_->latest_ms;
  for (const GpuBucket& b : f.gpus) {
    GP_ASSIGN_OR_RETURN(int64_t step, tier_step(b.tier, b.point.t_ms));
    latest = std::max(latest, b.point.t_ms + step);
  }
  for (const PoolBucket& b : f.pool) {
    GP_ASSIGN_OR_RETURN(int64_t step, tier_step(b.tier, b.point.t_ms));
    latest = std::max(latest, b.point.t_ms + step);
  }
  if (f.empty()) return Status::Ok();

  Status st = impl_->InTransaction([&]() -> Status {
    for (const GpuBucket& b : f.gpus) {
      const GpuPoint& p = b.point;
      GP_ASSIGN_OR_RETURN(
          Query q, impl_->Prepare("INSERT OR REPLACE INTO gpu_points (tier, node, gpu, t_ms, "
                                  "samples, util, util_max, mem, mem_max, mem_total, temp, power, "
                                  "energy, alloc) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                                  "?10, ?11, ?12, ?13, ?14)"));
      q.Bind(1, tiers[static_cast<size_t>(b.tier)].step_ms).Bind(2, b.node).Bind(3, b.gpu);
      q.Bind(4, p.t_ms)
          .Bind(5, p.samples)
          .BindReal(6, p.utilization)
          .BindReal(7, p.utilization_max);
      q.BindReal(8, p.memory_used_mib)
          .BindReal(9, p.memory_used_max_mib)
          .BindReal(10, p.memory_total_mib);
      q.BindReal(11, p.temperature_c)
          .BindReal(12, p.power_w)
          .BindReal(13, p.energy_j)
          .BindReal(14, p.allocated);
      GP_RETURN_IF_ERROR(q.Run());
    }
    for (const PoolBucket& b : f.pool) {
      const PoolPoint& p = b.point;
      GP_ASSIGN_OR_RETURN(
          Query q, impl_->Prepare("INSERT OR REPLACE INTO pool_points (tier, t_ms, samples, gpus, "
                                  "gpus_reporting, allocated_gpus, utilization_sum, power, "
                                  "jobs_running, jobs_pending, nodes_connected) VALUES (?1, ?2, "
                                  "?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"));
      q.Bind(1, tiers[static_cast<size_t>(b.tier)].step_ms).Bind(2, p.t_ms).Bind(3, p.samples);
      q.BindReal(4, p.gpus).BindReal(5, p.gpus_reporting).BindReal(6, p.allocated_gpus);
      q.BindReal(7, p.utilization_sum).BindReal(8, p.power_w).BindReal(9, p.jobs_running);
      q.BindReal(10, p.jobs_pending).BindReal(11, p.nodes_connected);
      GP_RETURN_IF_ERROR(q.Run());
    }
    if (latest == impl_->latest_ms) return Status::Ok();
    return impl_->SetMeta("latest_ms", std::to_string(latest));
  });
  if (st.ok()) impl_->latest_ms = latest;
  return st;
}

// While over max_bytes: deletes the oldest points of the finest tier that
// has any, an eighth of its span at a time, noting how far it cut.
Status HistoryStore::Impl::PruneBySize(bool* deleted) {
  for (const Tier& tier : options.tiers) {
    while (true) {
      GP_ASSIGN_OR_RETURN(int64_t bytes, Bytes());
      if (bytes <= options.max_bytes) return Status::Ok();
      GP_ASSIGN_OR_RETURN(auto span, Span(tier.step_ms));
      if (!span) break;  // this tier is empty: the next one
      const int64_t width = span->second - span->first + tier.step_ms;
      const int64_t batch =
          std::max(tier.step_ms, telemetry::BucketStart(width / kSizeBatchDivisor, tier.step_ms));
      const int64_t cutoff = span->first + batch;
      GP_RETURN_IF_ERROR(DeleteBefore(tier.step_ms, cutoff));
      *deleted = true;
      int64_t& cut = missing_before[tier.step_ms];
      cut = std::max(cut, cutoff);
      GP_RETURN_IF_ERROR(
          SetMeta("missing_before:" + std::to_string(tier.step_ms), std::to_string(cut)));
    }
  }
  return Status::Ok();  // every tier is empty: only the schema is left
}

Status HistoryStore::Prune(int64_t now_ms) {
  bool deleted = false;
  // PruneBySize notes its cuts as it goes; a rollback undoes them.
  const std::map<int64_t, int64_t> missing_before = impl_->missing_before;
  Status st = impl_->InTransaction([&]() -> Status {
    for (const Tier& tier : impl_->options.tiers) {
      GP_RETURN_IF_ERROR(impl_->DeleteBefore(tier.step_ms, now_ms - tier.keep_ms));
    }
    GP_ASSIGN_OR_RETURN(int64_t free_pages, impl_->Scalar("PRAGMA freelist_count"));
    deleted = free_pages > 0;
    GP_RETURN_IF_ERROR(impl_->PruneBySize(&deleted));
    if (now_ms <= impl_->latest_ms) return Status::Ok();
    return impl_->SetMeta("latest_ms", std::to_string(now_ms));
  });
  if (!st.ok()) {
    impl_->missing_before = missing_before;
    return st;
  }
  impl_->latest_ms = std::max(impl_->latest_ms, now_ms);
  if (!deleted) return Status::Ok();
  // Give the freed pages back: truncate the database file (incremental
  // vacuum), then copy that into the file now rather than at the next
  // automatic checkpoint, so the file on disk shrinks too.
  GP_RETURN_IF_ERROR(impl_->Exec("PRAGMA incremental_vacuum"));
  return impl_->Exec("PRAGMA wal_checkpoint(TRUNCATE)");
}

// ---------------------------------------------------------------------------
// Queries

// Validates a query and picks its tier (see the header).
Status HistoryStore::Impl::PlanQuery(int64_t since_ms, int64_t until_ms, int64_t step_ms,
                                     int64_t* tier_step, int64_t* used_step) {
  if (since_ms < 0) {
    return Status::InvalidArgument("since_ms: must not be negative (is " +
                                   std::to_string(since_ms) + ")");
  }
  if (since_ms >= until_ms) {
    return Status::InvalidArgument("since_ms (" + std::to_string(since_ms) +
                                   ") must be before until_ms (" + std::to_string(until_ms) + ")");
  }
  if (step_ms <= 0) {
    return Status::InvalidArgument("step_ms: must be positive (is " + std::to_string(step_ms) +
                                   ")");
  }
  const std::vector<Tier>& tiers = options.tiers;
  const int64_t reference = std::max(until_ms, latest_ms);
  const Tier* chosen = &tiers.back();  // none reaches back far enough: the longest kept
  for (const Tier& t : tiers) {
    auto cut = missing_before.find(t.step_ms);
    bool covers = since_ms >= reference - t.keep_ms &&
                  (cut == missing_before.end() || since_ms >= cut->second);
    if (covers) {
      chosen = &t;
      break;
    }
  }
  const int64_t base = chosen->step_ms;
  const int64_t multiple = step_ms / base + (step_ms % base != 0 ? 1 : 0);
  if (multiple > std::numeric_limits<int64_t>::max() / base) {
    return Status::InvalidArgument("step_ms: too large (is " + std::to_string(step_ms) + ")");
  }
  *tier_step = base;
  *used_step = multiple * base;
  const int64_t range = until_ms - since_ms;
  const int64_t points = range / *used_step + (range % *used_step != 0 ? 1 : 0);
  if (points > kHistoryMaxPoints) {
    const int64_t min_step = range / kHistoryMaxPoints + (range % kHistoryMaxPoints != 0 ? 1 : 0);
    return Status::InvalidArgument(
        "the query asks for " + std::to_string(points) + " points of " +
        std::to_string(*used_step) + " ms between since_ms and until_ms (at most " +
        std::to_string(kHistoryMaxPoints) + "): ask for step_ms of at least " +
        std::to_string(min_step) + " or a shorter range");
  }
  return Status::Ok();
}

Result<std::vector<GpuPoint>> HistoryStore::Impl::ReadGpu(int64_t tier, const std::string& node,
                                                          int32_t gpu, int64_t since_ms,
                                                          int64_t until_ms) {
  GP_ASSIGN_OR_RETURN(Query q, Prepare("SELECT t_ms, samples, util, util_max, mem, mem_max, "
                                       "mem_total, temp, power, energy, alloc FROM gpu_points "
                                       "WHERE tier = ?1 AND node = ?2 AND gpu = ?3 AND t_ms >= ?4 "
                                       "AND t_ms < ?5 ORDER BY t_ms"));
  q.Bind(1, tier).Bind(2, node).Bind(3, gpu).Bind(4, since_ms).Bind(5, until_ms);
  std::vector<GpuPoint> out;
  while (true) {
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    GpuPoint& p = out.emplace_back();
    p.t_ms = q.Int(0);
    p.samples = static_cast<int32_t>(q.Int(1));
    p.utilization = q.Real(2);
    p.utilization_max = q.Real(3);
    p.memory_used_mib = q.Real(4);
    p.memory_used_max_mib = q.Real(5);
    p.memory_total_mib = q.Real(6);
    p.temperature_c = q.Real(7);
    p.power_w = q.Real(8);
    p.energy_j = q.Real(9);
    p.allocated = q.Real(10);
  }
  return out;
}

Result<std::vector<GpuSeries>> HistoryStore::Gpus(const std::string& node,
                                                  const std::vector<int32_t>& gpus,
                                                  int64_t since_ms, int64_t until_ms,
                                                  int64_t step_ms) {
  if (node.empty()) return Status::InvalidArgument("node: must not be empty");
  for (int32_t g : gpus) {
    if (g < 0) {
      return Status::InvalidArgument("gpus: " + std::to_string(g) + " is not a GPU index");
    }
  }
  int64_t tier = 0;
  int64_t used = 0;
  GP_RETURN_IF_ERROR(impl_->PlanQuery(since_ms, until_ms, step_ms, &tier, &used));

  std::vector<int32_t> wanted = gpus;
  if (wanted.empty()) {
    GP_RETURN_IF_ERROR(impl_->ForEachGpu(tier, node, [&](const std::string&, int32_t gpu) {
      wanted.push_back(gpu);
      return Status::Ok();
    }));
  } else {
    std::sort(wanted.begin(), wanted.end());
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  }
  std::vector<GpuSeries> out;
  for (int32_t gpu : wanted) {
    GP_ASSIGN_OR_RETURN(std::vector<GpuPoint> points,
                        impl_->ReadGpu(tier, node, gpu, since_ms, until_ms));
    // With every GPU asked for, those silent over the range are left out.
    if (gpus.empty() && points.empty()) continue;
    out.push_back({node, gpu, used, used > tier ? telemetry::Resample(points, used) : points});
  }
  return out;
}

Result<PoolSeries> HistoryStore::Pool(int64_t since_ms, int64_t until_ms, int64_t step_ms) {
  int64_t tier = 0;
  int64_t used = 0;
  GP_RETURN_IF_ERROR(impl_->PlanQuery(since_ms, until_ms, step_ms, &tier, &used));
  GP_ASSIGN_OR_RETURN(
      Query q, impl_->Prepare("SELECT t_ms, samples, gpus, gpus_reporting, allocated_gpus, "
                              "utilization_sum, power, jobs_running, jobs_pending, "
                              "nodes_connected FROM pool_points WHERE tier = ?1 AND t_ms >= ?2 "
                              "AND t_ms < ?3 ORDER BY t_ms"));
  q.Bind(1, tier).Bind(2, since_ms).Bind(3, until_ms);
  std::vector<PoolPoint> points;
  while (true) {
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    PoolPoint& p = points.emplace_back();
    p.t_ms = q.Int(0);
    p.samples = static_cast<int32_t>(q.Int(1));
    p.gpus = q.Real(2);
    p.gpus_reporting = q.Real(3);
    p.allocated_gpus = q.Real(4);
    p.utilization_sum = q.Real(5);
    p.power_w = q.Real(6);
    p.jobs_running = q.Real(7);
    p.jobs_pending = q.Real(8);
    p.nodes_connected = q.Real(9);
  }
  PoolSeries out;
  out.step_ms = used;
  out.points = used > tier ? telemetry::Resample(points, used) : std::move(points);
  return out;
}

}  // namespace gpupool
