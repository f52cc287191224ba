// gpupool-accounting-bench: what the pool's money costs the server
// (server/accounting_service.h, store/sql_tx_accounting.cpp;
// docs/performance.md, "Accounting"). The accounting issue's targets:
// accrual under 5% of one core with 10,000 running attempts, `usage --by
// user` over a year of 1 million attempts under 1 s, and the ledger's
// growth in bytes per attempt-hour.
//
//   BM_TickSteady/attempts:N
//     A real SQLite store holding N/8 nodes of 8 GPUs ("NVIDIA
//     A100-SXM4-80GB"; a quarter owned by a lab) and N running 1-GPU jobs,
//     each with one live attempt placed minutes ago, and prices for A100
//     GPUs, CPUs and memory. One iteration is one AccountingService::Tick()
//     (default options: hour periods) a minute later than the last, inside
//     the hour: nothing is posted, what every attempt owes is recomputed.
//     Its CPU time / 60 s is the share of one core at a tick a minute.
//     Counter first_tick_ms: the fixture's first tick (a server's first
//     after a start: the ledger asked where each attempt's charges end).
//   BM_TickBoundary/attempts:N
//     The same store; one iteration is the tick just after an hour ends:
//     it posts each attempt's charge for the hour and the lending credits
//     of the attempts on lab-owned nodes. Counter posted: entries posted.
//   BM_UsageByUser/attempts:N, BM_UsageByDay/attempts:N,
//   BM_UsageMonthByGroup/attempts:N, BM_UsageOneUser/attempts:N
//     A ledger holding a year of N attempts (500 users, 50 labs, 200 nodes,
//     3 GPU classes; each attempt 1 to 59 minutes, so one or two hourly
//     charges, posted by metering's own EntriesDue, with lending credits on
//     lab-owned nodes), filled once per N and kept for the process. One
//     iteration is one SumUsage in a transaction, as GET /v1/usage runs it:
//     by user over the year (an admin's `usage --by user`), by day over the
//     year, by group over one month (since/until), and one user's usage by
//     day over the year (a member's `usage`, which names the caller).
//     Counters: rows, charges.
//   BM_LedgerGrowth/attempts:N
//     The same ledger's size: the database's pages after a checkpoint (the
//     store closed; page_count x page_size), per attempt-hour held and per
//     ledger entry. Its time is not a figure; its counters are:
//     bytes_per_attempt_hour, bytes_per_entry, db_bytes, free_bytes,
//     ledger_bytes and ledger_bytes_per_entry (the ledger table and its
//     indexes, from SQLite's dbstat), entries, charges, attempt_hours,
//     fill_s (the fill's wall time) and fill_entries_per_s.
//
// Run: build/bin/gpupool-accounting-bench --benchmark_repetitions=3
//        --benchmark_report_aggregates_only=true
// The smoke test (accounting_bench_smoke) runs the small sets briefly.
#include <benchmark/benchmark.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "accounting/metering.h"
#include "accounting/prices.h"
#include "common/clock.h"
#include "server/accounting_service.h"
#include "store/sqlite_store.h"

namespace gpupool::server {
namespace {

using accounting::LedgerEntry;
using accounting::Micros;
using accounting::PricedResource;
using accounting::PriceVersion;

constexpr int64_t kMinuteMs = 60'000;
constexpr int64_t kHourMs = 3'600'000;
constexpr int64_t kDayMs = 86'400'000;
constexpr int64_t kT0 = 1'700'006'400'000;  // midnight UTC (2023-11-15)
constexpr int kGpusPerNode = 8;

[[noreturn]] void Die(const std::string& what, const Status& s) {
  std::cerr << "gpupool-accounting-bench: " << what << ": " << s.ToString() << "\n";
  std::exit(1);
}

std::filesystem::path FreshDir(const std::string& what) {
  auto dir = std::filesystem::temp_directory_path() /
             ("gpupool-accounting-bench-" + what + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::unique_ptr<SqliteStore> OpenStore(const std::filesystem::path& dir) {
  auto store = SqliteStore::Open((dir / "state.db").string());
  if (!store.ok()) Die("open the store", store.status());
  return *std::move(store);
}

std::string Name(const char* format, int n) {
  char s[48];
  std::snprintf(s, sizeof s, format, n);
  return s;
}

// A deterministic pseudo-random sequence (the fills must not vary).
struct Lcg {
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  uint64_t Next() {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x >> 33;
  }
  int64_t Below(int64_t n) { return static_cast<int64_t>(Next() % static_cast<uint64_t>(n)); }
};

PriceVersion Price(PricedResource r, const std::string& gpu_class, Micros per_unit,
                   int64_t from_ms) {
  PriceVersion v;
  v.resource = r;
  v.gpu_class = gpu_class;
  v.per_unit = per_unit;
  v.from_ms = from_ms;
  v.set_by = "admin";
  return v;
}

// ---------------------------------------------------------------------------
// Accrual: a pool of N running attempts and its AccountingService.

constexpr int kTickLabs = 10;
constexpr int kTickUsers = 500;

class TickFixture {
 public:
  explicit TickFixture(int attempts)
      : dir_(FreshDir("tick-" + std::to_string(attempts))),
        clock_(kT0 + 10 * kMinuteMs),
        hour_(kT0) {
    store_ = OpenStore(dir_);
    const int nodes = (attempts + kGpusPerNode - 1) / kGpusPerNode;
    std::vector<std::string> node_ids, owner_of;
    Status s = store_->Transact([&](Tx& tx) -> Status {
      GP_RETURN_IF_ERROR(
          tx.AddPrice(Price(PricedResource::kGpu, "A100", 2'000'000, kT0 - kDayMs)).status());
      GP_RETURN_IF_ERROR(
          tx.AddPrice(Price(PricedResource::kCpu, "", 20'000, kT0 - kDayMs)).status());
      GP_RETURN_IF_ERROR(
          tx.AddPrice(Price(PricedResource::kMemory, "", 2'000, kT0 - kDayMs)).status());
      for (int g = 0; g < kTickLabs; ++g) {
        GroupRecord lab;
        lab.name = Name("lab-%02d", g);
        for (int u = g; u < kTickUsers; u += kTickLabs) lab.members.push_back(Name("user-%03d", u));
        lab.created_ms = kT0 - kDayMs;
        GP_RETURN_IF_ERROR(tx.PutGroup(lab));
      }
      for (int n = 0; n < nodes; ++n) {
        Node node;
        node.id = Name("n-%012x", 0x3f9a0000 + n);
        node.name = Name("lab-node-%04d", n);
        node.state = NodeState::kReady;
        for (int i = 0; i < kGpusPerNode; ++i) {
          GpuInfo g;
          g.index = i;
          g.uuid = node.name + "-gpu" + std::to_string(i);
          g.name = "NVIDIA A100-SXM4-80GB";
          g.memory_mib = 81920;
          g.cc_major = 8;
          g.minor_number = i;
          node.gpus.push_back(g);
        }
        node.cpu_milli = 128'000;
        node.memory_mib = 1024 * 1024;
        // A quarter of the machines belong to a lab (they earn lending
        // credits when other labs' jobs run there).
        if (n % 4 == 0) node.owner_group = Name("lab-%02d", (n / 4) % kTickLabs);
        node.registered_ms = kT0 - kDayMs;
        node.last_seen_ms = kT0;
        GP_RETURN_IF_ERROR(tx.PutNode(node));
        node_ids.push_back(node.id);
        owner_of.push_back(node.owner_group);
      }
      return Status::Ok();
    });
    if (!s.ok()) Die("fill the nodes", s);
    // The jobs and their attempts, in transactions of 1,000.
    for (int first = 0; first < attempts; first += 1000) {
      s = store_->Transact([&](Tx& tx) -> Status {
        for (int i = first; i < std::min(attempts, first + 1000); ++i) {
          const int user = i % kTickUsers;
          const int n = i / kGpusPerNode;
          Job job;
          job.owner = Name("user-%03d", user);
          job.spec.name = "train";
          job.spec.run = "python train.py";
          job.spec.resources.gpus = 1;
          job.spec.resources.cpu_milli = 8000;
          job.spec.resources.memory_mib = 65536;
          // One job in ten names no group: its owner pays.
          job.spec.group = i % 10 == 9 ? "default" : Name("lab-%02d", user % kTickLabs);
          job.state = JobState::kRunning;
          job.attempts = 1;
          job.created_ms = kT0 + kMinuteMs;
          job.updated_ms = job.created_ms;
          job.started_ms = job.created_ms;
          GP_ASSIGN_OR_RETURN(job.id, tx.InsertJob(job));
          job.current_attempt = MakeAttemptId(job.id, 1);
          GP_RETURN_IF_ERROR(tx.UpdateJob(job));
          Attempt a;
          a.id = job.current_attempt;
          a.job_id = job.id;
          a.number = 1;
          a.node_id = node_ids[n];
          a.gpu_uuids = {Name("lab-node-%04d", n) + "-gpu" + std::to_string(i % kGpusPerNode)};
          a.gpu_milli = 1000;
          a.state = AttemptState::kRunning;
          // Placed in the hour's first minutes (some minutes before now).
          a.created_ms = kT0 + kMinuteMs + (i % 240) * 1000;
          a.started_ms = a.created_ms + 2000;
          GP_RETURN_IF_ERROR(tx.PutAttempt(a));
          ++charges_per_hour_;
          const std::string& owner = owner_of[n];
          if (!owner.empty() && owner != job.spec.group) ++lending_per_hour_;
        }
        return Status::Ok();
      });
      if (!s.ok()) Die("fill the jobs", s);
    }
    service_ = std::make_unique<AccountingService>(*store_, clock_, AccountingOptions{});
    // The first tick after a start asks the ledger where each attempt's
    // charges end; the later ones remember.
    auto start = std::chrono::steady_clock::now();
    auto posted = service_->Tick();
    if (!posted.ok()) Die("the first tick", posted.status());
    first_tick_ms_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  ~TickFixture() {
    service_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  AccountingService& service() { return *service_; }
  FakeClock& clock() { return clock_; }
  // The start of the hour the clock is in.
  int64_t hour() const { return hour_; }
  void NextHour() { hour_ += kHourMs; }
  int64_t entries_per_hour() const { return charges_per_hour_ + lending_per_hour_; }
  double first_tick_ms() const { return first_tick_ms_; }

 private:
  std::filesystem::path dir_;
  FakeClock clock_;
  int64_t hour_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<AccountingService> service_;
  int64_t charges_per_hour_ = 0;
  int64_t lending_per_hour_ = 0;
  double first_tick_ms_ = 0;
};

// One fixture per size, kept for the process (the benchmarks of one size
// share it).
TickFixture& TickFixtureFor(int attempts) {
  static std::map<int, std::unique_ptr<TickFixture>> fixtures;
  auto& f = fixtures[attempts];
  if (!f) f = std::make_unique<TickFixture>(attempts);
  return *f;
}

void BM_TickSteady(benchmark::State& state) {
  const int attempts = static_cast<int>(state.range(0));
  TickFixture& f = TickFixtureFor(attempts);
  int64_t k = 0;
  for (auto _ : state) {
    // A minute after the last tick, wrapping inside the hour (minutes 10
    // to 54): no period ends, nothing is posted.
    f.clock().SetMs(f.hour() + 10 * kMinuteMs + (k++ % 45) * kMinuteMs);
    auto posted = f.service().Tick();
    if (!posted.ok()) Die("tick", posted.status());
    if (*posted != 0) {
      state.SkipWithError("a tick inside the hour posted entries");
      break;
    }
  }
  state.counters["attempts"] = attempts;
  state.counters["first_tick_ms"] = f.first_tick_ms();
}
BENCHMARK(BM_TickSteady)
    ->ArgNames({"attempts"})
    ->Arg(1000)  // the smoke test's
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond);

void BM_TickBoundary(benchmark::State& state) {
  const int attempts = static_cast<int>(state.range(0));
  TickFixture& f = TickFixtureFor(attempts);
  int64_t posted_count = 0;
  for (auto _ : state) {
    state.PauseTiming();
    f.NextHour();
    f.clock().SetMs(f.hour() + 30'000);  // the first tick of the next hour
    state.ResumeTiming();
    auto posted = f.service().Tick();
    if (!posted.ok()) Die("tick", posted.status());
    posted_count = *posted;
    if (posted_count != f.entries_per_hour()) {
      state.SkipWithError("the boundary tick did not post a charge per attempt");
      break;
    }
  }
  state.counters["attempts"] = attempts;
  state.counters["posted"] = static_cast<double>(posted_count);
}
BENCHMARK(BM_TickBoundary)
    ->ArgNames({"attempts"})
    ->Arg(1000)  // the smoke test's
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------
// Usage reports and the ledger's size: a year of N attempts.

constexpr int kUsers = 500;
constexpr int kLabs = 50;
constexpr int kNodes = 200;
constexpr int64_t kYearMs = 365 * kDayMs;
constexpr int kEntriesPerTx = 10'000;
const char* const kGpuClasses[] = {"A100", "H100", "L40S"};

// A database's size as SQLite counts it, after a checkpoint: its pages,
// those free, and those of the ledger table and its indexes (the dbstat
// table; 0 when this SQLite lacks it).
struct DbSizes {
  int64_t db_bytes = 0;
  int64_t free_bytes = 0;
  int64_t ledger_bytes = 0;
  int64_t wal_bytes = 0;  // left beside it (0 after a clean close)
};

DbSizes MeasureDb(const std::filesystem::path& path) {
  DbSizes out;
  const std::filesystem::path wal = path.string() + "-wal";
  if (std::filesystem::exists(wal)) {
    out.wal_bytes = static_cast<int64_t>(std::filesystem::file_size(wal));
  }
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    std::cerr << "gpupool-accounting-bench: open " << path << ": " << sqlite3_errmsg(db) << "\n";
    std::exit(1);
  }
  auto one = [&](const char* sql) -> int64_t {
    sqlite3_stmt* st = nullptr;
    int64_t v = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      v = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    return v;
  };
  one("PRAGMA wal_checkpoint(TRUNCATE)");
  const int64_t page = one("PRAGMA page_size");
  out.db_bytes = page * one("PRAGMA page_count");
  out.free_bytes = page * one("PRAGMA freelist_count");
  out.ledger_bytes =
      one("SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name = 'ledger' OR name IN "
          "(SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'ledger')");
  sqlite3_close(db);
  return out;
}

class LedgerFixture {
 public:
  explicit LedgerFixture(int attempts) : dir_(FreshDir("ledger-" + std::to_string(attempts))) {
    store_ = OpenStore(dir_);
    accounting::PriceBook book({Price(PricedResource::kGpu, "A100", 2'000'000, kT0 - kDayMs),
                                Price(PricedResource::kGpu, "H100", 3'500'000, kT0 - kDayMs),
                                Price(PricedResource::kGpu, "L40S", 1'000'000, kT0 - kDayMs),
                                Price(PricedResource::kCpu, "", 20'000, kT0 - kDayMs),
                                Price(PricedResource::kMemory, "", 2'000, kT0 - kDayMs)});
    const accounting::MeteringRules rules;  // hour periods, 80% lending credits
    Lcg rng;
    std::vector<LedgerEntry> batch;
    auto flush = [&] {
      Status s = store_->Transact([&](Tx& tx) -> Status {
        for (const LedgerEntry& e : batch) GP_RETURN_IF_ERROR(tx.PostEntry(e).status());
        return Status::Ok();
      });
      if (!s.ok()) Die("fill the ledger", s);
      batch.clear();
    };
    auto start = std::chrono::steady_clock::now();
    int64_t gpu_milli_ms = 0;
    for (int i = 0; i < attempts; ++i) {
      accounting::Holding h;
      const int user = static_cast<int>(rng.Below(kUsers));
      const int node = static_cast<int>(rng.Below(kNodes));
      h.attempt_id = MakeAttemptId(i + 1, 1);
      h.job_id = i + 1;
      h.user = Name("user-%03d", user);
      h.group = rng.Below(10) == 0 ? "default" : Name("lab-%02d", user % kLabs);
      h.node_id = Name("n-%012x", 0x3f9a0000 + node);
      if (node % 4 == 0) h.provider_group = Name("lab-%02d", (node / 4) % kLabs);
      h.use.gpu_class = kGpuClasses[node % 3];
      const int64_t gpus = rng.Below(10) < 7 ? 1 : 2 + rng.Below(3) * 2;  // 1, 2, 4 or 6
      h.use.gpu_milli = 1000 * gpus;
      h.use.cpu_milli = 4000 * gpus;
      h.use.memory_mib = 32768 * gpus;
      // Spread over the year in order, each 1 to 59 minutes long: half of
      // them cross an hour and are charged twice.
      h.held_from_ms = kT0 + static_cast<int64_t>(static_cast<double>(i) * kYearMs / attempts) +
                       rng.Below(kMinuteMs);
      h.freed_ms = h.held_from_ms + kMinuteMs + rng.Below(58 * kMinuteMs);
      for (LedgerEntry& e : accounting::EntriesDue(h, 0, h.freed_ms, book, rules)) {
        if (e.kind == accounting::EntryKind::kCharge) {
          ++charges_;
          gpu_milli_ms += e.GpuMilliMs();
          attempt_ms_ += e.at_ms - e.from_ms;
        }
        batch.push_back(std::move(e));
        ++entries_;
      }
      if (static_cast<int>(batch.size()) >= kEntriesPerTx) flush();
    }
    if (!batch.empty()) flush();
    fill_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // The size once checkpointed: the store closed (its last connection
    // checkpoints the WAL into the database), then read by SQLite.
    store_.reset();
    sizes_ = MeasureDb(dir_ / "state.db");
    store_ = OpenStore(dir_);
    std::cerr << "gpupool-accounting-bench: filled a year of " << attempts << " attempts ("
              << entries_ << " ledger entries, " << charges_ << " charges, "
              << static_cast<int64_t>(attempt_hours()) << " attempt-hours, "
              << static_cast<int64_t>(static_cast<double>(gpu_milli_ms) / 1000 / kHourMs)
              << " GPU-hours) in " << fill_s_ << " s; " << sizes_.db_bytes
              << " bytes, the ledger's " << sizes_.ledger_bytes << "\n";
  }
  ~LedgerFixture() {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  Store& store() { return *store_; }
  int64_t entries() const { return entries_; }
  int64_t charges() const { return charges_; }
  double attempt_hours() const { return static_cast<double>(attempt_ms_) / kHourMs; }
  const DbSizes& sizes() const { return sizes_; }
  double fill_s() const { return fill_s_; }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<SqliteStore> store_;
  int64_t entries_ = 0;
  int64_t charges_ = 0;
  int64_t attempt_ms_ = 0;
  DbSizes sizes_;
  double fill_s_ = 0;
};

LedgerFixture& LedgerFixtureFor(int attempts) {
  static std::map<int, std::unique_ptr<LedgerFixture>> fixtures;
  auto& f = fixtures[attempts];
  if (!f) f = std::make_unique<LedgerFixture>(attempts);
  return *f;
}

void RunUsage(benchmark::State& state, const UsageQuery& q) {
  LedgerFixture& f = LedgerFixtureFor(static_cast<int>(state.range(0)));
  std::vector<UsageRow> rows;
  for (auto _ : state) {
    Status s = f.store().Transact([&](Tx& tx) -> Status {
      GP_ASSIGN_OR_RETURN(rows, tx.SumUsage(q));
      return Status::Ok();
    });
    if (!s.ok()) Die("usage", s);
    benchmark::DoNotOptimize(rows.data());
  }
  int64_t charges = 0;
  for (const UsageRow& r : rows) charges += r.charges;
  if (rows.empty() || charges == 0) state.SkipWithError("the report summed no charge");
  state.counters["rows"] = static_cast<double>(rows.size());
  state.counters["charges"] = static_cast<double>(charges);
}

void BM_UsageByUser(benchmark::State& state) {
  UsageQuery q;
  q.by = UsageBy::kUser;
  RunUsage(state, q);
}

void BM_UsageByDay(benchmark::State& state) {
  UsageQuery q;
  q.by = UsageBy::kDay;
  RunUsage(state, q);
}

void BM_UsageMonthByGroup(benchmark::State& state) {
  UsageQuery q;
  q.by = UsageBy::kGroup;
  q.since_ms = kT0 + 180 * kDayMs;  // a 30-day month in the middle of the year
  q.until_ms = q.since_ms + 30 * kDayMs;
  RunUsage(state, q);
}

void BM_UsageOneUser(benchmark::State& state) {
  UsageQuery q;
  q.by = UsageBy::kDay;
  q.user = "user-042";
  RunUsage(state, q);
}

void UsageSizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"attempts"});
  b->Arg(10'000);  // the smoke test's
  b->Arg(1'000'000);
  b->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_UsageByUser)->Apply(UsageSizes);
BENCHMARK(BM_UsageByDay)->Apply(UsageSizes);
BENCHMARK(BM_UsageMonthByGroup)->Apply(UsageSizes);
BENCHMARK(BM_UsageOneUser)->Apply(UsageSizes);

void BM_LedgerGrowth(benchmark::State& state) {
  LedgerFixture& f = LedgerFixtureFor(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(f.sizes());
  const DbSizes& sizes = f.sizes();
  const double bytes = static_cast<double>(sizes.db_bytes);
  const double entries = static_cast<double>(f.entries());
  state.counters["db_bytes"] = bytes;
  state.counters["free_bytes"] = static_cast<double>(sizes.free_bytes);
  state.counters["wal_bytes"] = static_cast<double>(sizes.wal_bytes);
  state.counters["ledger_bytes"] = static_cast<double>(sizes.ledger_bytes);
  state.counters["entries"] = entries;
  state.counters["charges"] = static_cast<double>(f.charges());
  state.counters["attempt_hours"] = f.attempt_hours();
  state.counters["bytes_per_attempt_hour"] = bytes / f.attempt_hours();
  state.counters["bytes_per_entry"] = bytes / entries;
  state.counters["ledger_bytes_per_entry"] = static_cast<double>(sizes.ledger_bytes) / entries;
  state.counters["fill_s"] = f.fill_s();
  state.counters["fill_entries_per_s"] = entries / f.fill_s();
}
BENCHMARK(BM_LedgerGrowth)
    ->ArgNames({"attempts"})
    ->Arg(10'000)  // the smoke test's
    ->Arg(1'000'000)
    ->Iterations(1);

}  // namespace
}  // namespace gpupool::server

BENCHMARK_MAIN();
