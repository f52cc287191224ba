// Job logs on the server: what it keeps of the output agents ship (the
// output limit per attempt rank, model/job_output.h), what it shows (pages
// of a job's log, a summary of its output), and log retention (how long
// and how much of ended jobs' logs it keeps).
//
// Intake (TakeLogLines) runs in the caller's transaction, the Pool's that
// applies the agent's message: resent lines are skipped before they are
// counted, lines past the limit are dropped and the marker stored in their
// place once, so no agent, broken or hostile, makes the server keep more
// than the limit (plus the events' allowance) per attempt rank.
//
// Retention (LogCollector): the logs of a job that ended longer than
// `retention_ms` ago are removed; while the stored logs of all jobs exceed
// `budget_bytes`, those of the jobs that ended longest ago go, one job at a
// time (the logs of a job still running are never removed). Each Step is
// one short transaction, so a large collection never holds the server's
// loop for long; CollectLogs runs the steps on the loop.
//
// Threading: the server's event loop (LogCollector, CollectLogs); the pure
// functions anywhere.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "model/job_output.h"
#include "net/event_loop.h"
#include "store/store.h"

namespace gpupool::server {

struct LogOptions {
  // --max-job-output: what an attempt rank's log may hold (the provider's
  // policy may lower it on its agent).
  int64_t max_job_output_bytes = kDefaultMaxJobOutputBytes;
  // --log-retention: how long after its job ended a log is kept.
  int64_t retention_ms = int64_t{30} * 24 * 3600 * 1000;
  // --log-budget: the stored logs of all jobs (compressed, as on disk).
  int64_t budget_bytes = int64_t{20} << 30;
};

// The pool's own events about a job (budget alerts) go to a log stream of
// the server's: attempt "<job>.pool", rank 0, its offsets counted by the
// server, so they never meet what an agent ships (whose offsets are
// positions in its own files). Readers show them as any "event" line.
std::string PoolEventsStream(int64_t job_id);
Status AppendPoolEvent(Tx& tx, int64_t job_id, const std::string& text, int64_t now_ms);

// Applies the output limit to `lines` (of one attempt rank, in offset
// order, as shipped) and stores what is kept. Returns the lines stored.
Result<std::vector<LogLine>> TakeLogLines(Tx& tx, const LogOptions& options, int64_t job_id,
                                          const std::string& attempt_id, int32_t rank,
                                          std::vector<LogLine> lines, int64_t now_ms);

// A page of a job's log; `removed` when retention removed it.
struct LogPage {
  std::vector<LogLine> lines;
  std::optional<LogRemoval> removed;
};
Result<LogPage> ReadLogPage(Tx& tx, int64_t job_id, int64_t after_cursor, int32_t limit);

// What a job printed, for GET /v1/jobs/{id} and `gpupool job`.
struct JobOutput {
  int64_t lines = 0;
  int64_t bytes = 0;  // as counted against the limit
  int64_t stored_bytes = 0;
  std::vector<LogStream> limited;  // the attempt ranks whose limit was reached
  std::optional<LogRemoval> removed;
};
Result<JobOutput> SummarizeJobOutput(Tx& tx, int64_t job_id);

// "the output of job 12 was removed on 2024-05-01 10:00:00 UTC: <reason>"
std::string DescribeRemoval(const LogRemoval& r);

// Why retention removes the logs of `job` now (nullopt: they stay, and so
// do those of every job that ended later). `stored_bytes` is what all
// jobs' logs hold before this one goes.
struct LogRemovalCause {
  bool budget = false;  // false: the retention period
  std::string reason;   // stored with the removal, shown to readers
};
std::optional<LogRemovalCause> LogRemovalReason(const LogOptions& options, const JobLogSize& job,
                                                int64_t stored_bytes, int64_t now_ms);

struct LogGcStats {
  int64_t jobs_removed = 0;
  int64_t by_retention = 0;  // of jobs_removed
  int64_t by_budget = 0;
  int64_t lines_removed = 0;
  int64_t bytes_removed = 0;  // stored bytes
  int64_t chunks_freed = 0;
  LogTotals kept;  // what is left
};

class LogCollector {
 public:
  LogCollector(Store& store, const Clock& clock, LogOptions options)
      : store_(store), clock_(clock), options_(options) {}
  // One bounded step: removes the logs of up to kJobsPerStep jobs, or frees
  // up to kChunksPerStep chunks of removed logs. Returns whether more is
  // left to do; `stats` adds what it did.
  Result<bool> Step(LogGcStats& stats);
  Result<LogTotals> Totals();

  static constexpr int32_t kJobsPerStep = 64;
  static constexpr int64_t kChunksPerStep = 128;

 private:
  Store& store_;
  const Clock& clock_;
  LogOptions options_;
};

// Runs the collector's steps on `loop`, one per turn, until it is done;
// `done` gets what was collected. One collection at a time: a call while
// one runs waits for it and gets the same result.
class LogGc {
 public:
  LogGc(net::EventLoop& loop, LogCollector& collector) : loop_(loop), collector_(collector) {}
  void Collect(std::function<void(Result<LogGcStats>)> done);

 private:
  void Next();
  net::EventLoop& loop_;
  LogCollector& collector_;
  std::vector<std::function<void(Result<LogGcStats>)>> waiting_;
  LogGcStats stats_;
};

}  // namespace gpupool::server
