// The SQLite store's log chunks (store/sql_logs.h): what the shared
// conformance suite cannot see (chunk rows, compression, freeing in steps)
// and the version 7 migration of a version 6 database full of log rows.
#include "store/sql_logs.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "model/job_output.h"
#include "store/sqlite_store.h"
#include "store/sqlite_testing.h"

namespace gpupool {
namespace {

using sqlite_testing::MustOpen;
using sqlite_testing::RawDb;
using sqlite_testing::TempDir;

Status Tx(Store& store, const std::function<Status(gpupool::Tx&)>& fn) {
  return store.Transact(fn);
}

Job RunningJob() {
  Job job;
  job.owner = "alice";
  job.spec.name = "j";
  job.spec.run = "true";
  job.state = JobState::kRunning;
  return job;
}

LogLine Line(const std::string& attempt, int64_t offset, std::string text) {
  LogLine l;
  l.attempt_id = attempt;
  l.offset = offset;
  l.stream = "stdout";
  l.ts_ms = 1000 + offset;
  l.text = std::move(text);
  return l;
}

int64_t Count(RawDb& raw, const std::string& sql) { return std::stoll(raw.Scalar(sql)); }

TEST(SqliteLogsTest, AFloodIsStoredInFewCompressedChunks) {
  TempDir dir;
  auto store = MustOpen(dir.db());
  ASSERT_NE(store, nullptr);
  int64_t job_id = 0;
  ASSERT_TRUE(Tx(*store, [&](gpupool::Tx& tx) -> Status {
                GP_ASSIGN_OR_RETURN(job_id, tx.InsertJob(RunningJob()));
                return Status::Ok();
              }).ok());
  // 200,000 lines of "y" in messages of 4,000, as an agent ships `yes`.
  constexpr int kLines = 200'000;
  for (int sent = 0; sent < kLines; sent += 4000) {
    std::vector<LogLine> batch;
    for (int i = sent; i < sent + 4000; ++i) batch.push_back(Line("1.1", int64_t{i} * 20, "y"));
    ASSERT_TRUE(Tx(*store, [&](gpupool::Tx& tx) { return tx.AppendLogs(job_id, batch); }).ok());
  }
  RawDb raw(dir.db());
  int64_t chunks = Count(raw, "SELECT COUNT(*) FROM log_chunks");
  int64_t stored = Count(raw, "SELECT SUM(length(data)) FROM log_chunks");
  std::printf("[ chunks   ] %d lines in %lld chunks, %lld bytes stored\n", kLines,
              static_cast<long long>(chunks), static_cast<long long>(stored));
  EXPECT_LT(chunks, kLines / 1000);
  EXPECT_LT(stored, int64_t{kLines} * LogLineCost("y") / 20);
  // Every chunk is compressed, the newest too (it is appended to all the same).
  EXPECT_EQ(Count(raw, "SELECT COUNT(*) FROM log_chunks WHERE zstd = 0"), 0);
  EXPECT_EQ(Count(raw, "SELECT MAX(raw_bytes) < 2 * " + std::to_string(kLogChunkBytes) +
                           " FROM log_chunks"),
            1);
  LogStream stream;
  std::vector<LogLine> tail;
  ASSERT_TRUE(Tx(*store, [&](gpupool::Tx& tx) -> Status {
                GP_ASSIGN_OR_RETURN(auto s, tx.GetLogStream("1.1", 0));
                if (s) stream = *s;
                GP_ASSIGN_OR_RETURN(auto first, tx.ReadLogs(job_id, 0, 1));
                GP_ASSIGN_OR_RETURN(tail, tx.ReadLogs(job_id, first[0].cursor + kLines - 3, 10));
                return Status::Ok();
              }).ok());
  EXPECT_EQ(stream.lines, kLines);
  EXPECT_EQ(stream.bytes, int64_t{kLines} * LogLineCost("y"));
  EXPECT_EQ(stream.stored_bytes, stored);
  EXPECT_EQ(stream.last_offset, int64_t{kLines - 1} * 20);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[1].offset, int64_t{kLines - 1} * 20);
}

TEST(SqliteLogsTest, ASlowJobsLinesGoOnInOneCompressedChunk) {
  TempDir dir;
  auto store = MustOpen(dir.db());
  ASSERT_NE(store, nullptr);
  int64_t job_id = 0;
  ASSERT_TRUE(Tx(*store, [&](gpupool::Tx& tx) -> Status {
                GP_ASSIGN_OR_RETURN(job_id, tx.InsertJob(RunningJob()));
                return Status::Ok();
              }).ok());
  // A line a message, as a job that prints now and then is shipped.
  std::vector<std::string> want;
  for (int i = 0; i < 500; ++i) {
    want.push_back("epoch " + std::to_string(i) + " loss 0." + std::to_string(1000 - i) +
                   std::string(60, '.'));
    ASSERT_TRUE(Tx(*store, [&](gpupool::Tx& tx) {
                  return tx.AppendLogs(job_id, {Line("1.1", i * 100, want.back())});
                }).ok());
  }
  RawDb raw(dir.db());
  EXPECT_EQ(Count(raw, "SELECT COUNT(*) FROM log_chunks"), 1);
  EXPECT_EQ(Count(raw, "SELECT zstd FROM log_chunks"), 1);
  EXPECT_LT(Count(raw, "SELECT length(data) FROM log_chunks"),
            Count(raw, "SELECT raw_bytes FROM log_chunks") / 3);
  std::vector<LogLine> got;
  LogStream stream;
  ASSERT_TRUE(Tx(*store, [&](gpupool::Tx& tx) -> Status {
                GP_ASSIGN_OR_RETURN(got, tx.ReadLogs(job_id, 0, 1000));
                GP_ASSIGN_OR_RETURN(auto s, tx.GetLogStream("1.1", 0));
                if (s) stream = *s;
                return Status::Ok();
              }).ok());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].text, want[i]) << i;
  EXPECT_EQ(stream.stored_bytes, Count(raw, "SELECT length(data) FROM log_chunks"));
}

TEST(SqliteLogsTest, RemovedLogsAreFreedInBoundedSteps) {
  TempDir dir;
  auto store = MustOpen(dir.db());
  ASSERT_NE(store, nullptr);
  int64_t job_id = 0;
  ASSERT_TRUE(Tx(*store, [&](gpupool::Tx& tx) -> Status {
                Job j = RunningJob();
                j.state = JobState::kSucceeded;
                j.finished_ms = 5;
                GP_ASSIGN_OR_RETURN(job_id, tx.InsertJob(j));
                std::vector<LogLine> lines;
                for (int i = 0; i < 5000; ++i)
                  lines.push_back(Line("1.1", i * 100, std::string(90, 'x')));
                return tx.AppendLogs(job_id, lines);
              }).ok());
  RawDb raw(dir.db());
  int64_t chunks = Count(raw, "SELECT COUNT(*) FROM log_chunks");
  ASSERT_GT(chunks, 5);
  ASSERT_TRUE(
      Tx(*store, [&](gpupool::Tx& tx) { return tx.RemoveJobLogs(job_id, 10, "test"); }).ok());
  std::vector<int64_t> steps;
  while (true) {
    int64_t n = 0;
    ASSERT_TRUE(Tx(*store, [&](gpupool::Tx& tx) -> Status {
                  GP_ASSIGN_OR_RETURN(n, tx.DeleteRemovedLogChunks(3));
                  return Status::Ok();
                }).ok());
    if (n == 0) break;
    steps.push_back(n);
    ASSERT_LE(n, 3);
    ASSERT_LT(steps.size(), 1000u);
  }
  int64_t freed = 0;
  for (int64_t n : steps) freed += n;
  EXPECT_EQ(freed, chunks);
  EXPECT_EQ(Count(raw, "SELECT COUNT(*) FROM log_chunks"), 0);
}

constexpr int kV6Jobs = 40;

struct V6Row {
  int64_t cursor;
  int64_t job_id;
  std::string attempt_id;
  int32_t rank;
  int64_t offset;
  std::string stream;
  int64_t ts_ms;
  std::string text;
};

// A version 6 database with kV6Jobs jobs (some ended, some running, some
// multi-node) and thousands of log rows interleaved between them, as a busy
// pool writes them. Returns the rows it wrote, by cursor.
std::vector<V6Row> MakeV6Database(const std::string& path, int rows, bool orphan_row = false) {
  {  // the schema as the released migrations 1 to 6 leave it
    SqliteOptions o;
    o.migrations = SqliteStore::Migrations().first(6);
    o.backup_before_migrating = false;
    auto v6 = SqliteStore::Open(path, o);
    EXPECT_TRUE(v6.ok()) << v6.status().ToString();
  }
  RawDb raw(path);
  raw.Exec("BEGIN");
  for (int j = 1; j <= kV6Jobs; ++j) {
    const char* state = j % 3 == 0 ? "running" : j % 3 == 1 ? "succeeded" : "failed";
    raw.Exec(
        "INSERT INTO jobs (id, owner, name, state, reason, exit_code, attempts, "
        "current_attempt, created_ms, updated_ms, started_ms, finished_ms, spec) VALUES (" +
        std::to_string(j) + ", 'alice', 'job', '" + state + "', '', NULL, 1, '" +
        std::to_string(j) + ".1', 10, 11, 12, " + (j % 3 == 0 ? "0" : "13") +
        R"(, '{"name":"job","run":"true","resources":{"gpus":1}}'))");
  }
  std::mt19937 rng(7);
  std::vector<V6Row> out;
  std::map<std::pair<std::string, int32_t>, int64_t> next_offset;
  sqlite3_stmt* ins = nullptr;
  sqlite3_prepare_v2(raw.get(),
                     "INSERT INTO logs (job_id, attempt_id, rank, \"offset\", stream, ts_ms, text) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                     -1, &ins, nullptr);
  const std::string unicode = "\xC3\xBC\xE2\x82\xAC \xF0\x9F\x98\x80";
  for (int i = 0; i < rows; ++i) {
    V6Row r;
    r.job_id = 1 + static_cast<int64_t>(rng() % kV6Jobs);
    r.attempt_id = std::to_string(r.job_id) + "." + std::to_string(1 + rng() % 2);
    r.rank = r.job_id % 5 == 0 ? static_cast<int32_t>(rng() % 3) : 0;
    int64_t& next = next_offset[{r.attempt_id, r.rank}];
    // Now and then a line whose offset went backwards (v6 kept those).
    r.offset = (i % 997 == 5 && next > 100) ? next - 50 - (i % 7) : next;
    switch (i % 5) {
      case 0:
        r.text = "step " + std::to_string(i) + " loss 0." + std::to_string(rng() % 1000);
        break;
      case 1:
        r.text = "";
        break;
      case 2:
        r.text = unicode + std::to_string(i);
        break;
      case 3:
        r.text = std::string(1 + rng() % 3000, 'a' + static_cast<char>(i % 26));
        break;
      default:
        r.text = "warning: something " + std::to_string(rng());
    }
    r.stream = i % 11 == 0 ? "stderr" : i % 13 == 0 ? "event" : "stdout";
    r.ts_ms = 1'700'000'000'000 + i * 37 - (i % 17 == 0 ? 5000 : 0);
    if (r.offset == next) next += static_cast<int64_t>(r.text.size()) + 16;
    sqlite3_bind_int64(ins, 1, r.job_id);
    sqlite3_bind_text(ins, 2, r.attempt_id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(ins, 3, r.rank);
    sqlite3_bind_int64(ins, 4, r.offset);
    sqlite3_bind_text(ins, 5, r.stream.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(ins, 6, r.ts_ms);
    sqlite3_bind_text(ins, 7, r.text.data(), static_cast<int>(r.text.size()), SQLITE_TRANSIENT);
    // A backwards offset may hit one already there: that row is left out.
    if (sqlite3_step(ins) == SQLITE_DONE) {
      r.cursor = sqlite3_last_insert_rowid(raw.get());
      out.push_back(std::move(r));
    }
    sqlite3_reset(ins);
  }
  sqlite3_finalize(ins);
  // Cursors are never reused: rows deleted at the end leave the sequence
  // above the highest cursor kept.
  raw.Exec("DELETE FROM logs WHERE cursor > " + std::to_string(out[out.size() - 3].cursor));
  out.resize(out.size() - 2);
  if (orphan_row) {
    // A line of a job that is not there (this connection does not enforce
    // foreign keys).
    raw.Exec(
        "INSERT INTO logs (job_id, attempt_id, rank, \"offset\", stream, ts_ms, text) "
        "VALUES (999, '999.1', 0, 0, 'stdout', 1, 'orphan')");
  }
  raw.Exec("COMMIT");
  return out;
}

TEST(SqliteLogsTest, MigratesAVersion6DatabaseWithThousandsOfLogRows) {
  TempDir dir;
  constexpr int kRows = 6000;
  std::vector<V6Row> rows = MakeV6Database(dir.db(), kRows);
  ASSERT_GT(rows.size(), 5900u);
  RawDb before(dir.db());
  const int64_t sequence = Count(before, "SELECT seq FROM sqlite_sequence WHERE name = 'logs'");
  ASSERT_GT(sequence, rows.back().cursor);

  auto store = MustOpen(dir.db());
  ASSERT_NE(store, nullptr);
  RawDb raw(dir.db());
  EXPECT_EQ(raw.Scalar("PRAGMA user_version"), std::to_string(SqliteStore::kSchemaVersion));
  EXPECT_EQ(raw.Scalar("SELECT COUNT(*) FROM sqlite_master WHERE name = 'logs'"), "0");
  // Packed: a few chunks per attempt rank, not a row per line.
  EXPECT_LT(Count(raw, "SELECT COUNT(*) FROM log_chunks"), static_cast<int64_t>(rows.size()) / 8);

  std::map<int64_t, std::vector<V6Row>> by_job;
  std::map<std::pair<std::string, int32_t>, int64_t> max_offset;
  for (const V6Row& r : rows) {
    by_job[r.job_id].push_back(r);
    auto& m = max_offset.try_emplace({r.attempt_id, r.rank}, -1).first->second;
    m = std::max(m, r.offset);
  }
  Status st = store->Transact([&](gpupool::Tx& tx) -> Status {
    for (const auto& [job_id, want] : by_job) {
      // Read in small pages: the same lines, in the same order, with the
      // same cursors, as before the migration.
      std::vector<LogLine> got;
      int64_t cursor = 0;
      while (true) {
        GP_ASSIGN_OR_RETURN(auto page, tx.ReadLogs(job_id, cursor, 7));
        if (page.empty()) break;
        cursor = page.back().cursor;
        got.insert(got.end(), page.begin(), page.end());
      }
      EXPECT_EQ(got.size(), want.size()) << "job " << job_id;
      for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
        const V6Row& w = want[i];
        LogLine expect{w.attempt_id, w.offset, w.stream, w.ts_ms, w.text, w.cursor, w.rank};
        EXPECT_EQ(got[i], expect) << "job " << job_id << " line " << i;
        if (got[i] != expect) break;
      }
    }
    for (const auto& [key, offset] : max_offset) {
      GP_ASSIGN_OR_RETURN(int64_t last, tx.LastLogOffset(key.first, key.second));
      EXPECT_EQ(last, offset) << key.first << " rank " << key.second;
    }
    GP_ASSIGN_OR_RETURN(LogTotals totals, tx.GetLogTotals());
    EXPECT_EQ(totals.lines, static_cast<int64_t>(rows.size()));
    EXPECT_EQ(totals.jobs, static_cast<int64_t>(by_job.size()));
    // The ended jobs are the retention's, oldest first.
    GP_ASSIGN_OR_RETURN(auto ended, tx.ListEndedJobLogs(1000));
    int64_t ended_jobs = 0;
    for (const auto& [job_id, want] : by_job) ended_jobs += job_id % 3 != 0;
    EXPECT_EQ(static_cast<int64_t>(ended.size()), ended_jobs);
    // New lines continue after every cursor ever handed out.
    GP_RETURN_IF_ERROR(tx.AppendLogs(3, {Line("3.1", 1'000'000'000, "after the migration")}));
    GP_ASSIGN_OR_RETURN(auto last, tx.ReadLogs(3, rows.back().cursor, 10));
    EXPECT_EQ(last.size(), 1u);
    if (!last.empty()) {
      EXPECT_GT(last[0].cursor, sequence);
    }
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(raw.Scalar("PRAGMA integrity_check"), "ok");
}

TEST(SqliteLogsTest, AFailedVersion7MigrationLeavesTheVersion6DatabaseAsItWas) {
  TempDir dir;
  std::vector<V6Row> rows = MakeV6Database(dir.db(), 500, /*orphan_row=*/true);
  auto opened = SqliteStore::Open(dir.db());
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("version 7"), std::string::npos)
      << opened.status().ToString();
  EXPECT_NE(opened.status().message().find("job 999"), std::string::npos)
      << opened.status().ToString();
  RawDb raw(dir.db());
  EXPECT_EQ(raw.Scalar("PRAGMA user_version"), "6");
  EXPECT_EQ(Count(raw, "SELECT COUNT(*) FROM logs"), static_cast<int64_t>(rows.size()) + 1);
  EXPECT_EQ(raw.Scalar("SELECT COUNT(*) FROM sqlite_master WHERE name = 'log_chunks'"), "0");
}

}  // namespace
}  // namespace gpupool
