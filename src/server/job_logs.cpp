#include "server/job_logs.h"

#include <utility>

#include "common/units.h"

namespace gpupool::server {

Result<std::vector<LogLine>> TakeLogLines(Tx& tx, const LogOptions& options, int64_t job_id,
                                          const std::string& attempt_id, int32_t rank,
                                          std::vector<LogLine> lines, int64_t now_ms) {
  GP_ASSIGN_OR_RETURN(auto stream, tx.GetLogStream(attempt_id, rank));
  int64_t last = stream ? stream->last_offset : -1;
  OutputBudget budget(options.max_job_output_bytes, stream ? stream->bytes : 0,
                      stream && stream->limit_reached_ms > 0);
  bool reached = budget.reached();
  std::vector<LogLine> kept;
  std::string limit_event;  // the marker, when the limit is reached now
  bool dropped = false;
  for (LogLine& l : lines) {
    // A resend is skipped before it is counted: it was counted the first time.
    if (l.offset <= last) continue;
    last = l.offset;
    l.attempt_id = attempt_id;
    l.rank = rank;
    auto verdict = l.stream == "event" ? budget.Event(l.text) : budget.Output(l.text);
    if (verdict == OutputBudget::Verdict::kKeep) {
      if (budget.reached() && !reached) limit_event = l.text;  // the agent's marker
      kept.push_back(std::move(l));
    } else if (verdict == OutputBudget::Verdict::kDropMarked) {
      // The agent did not stop at the limit: the server's marker, in the
      // place of the first line dropped.
      LogLine marker;
      marker.attempt_id = attempt_id;
      marker.rank = rank;
      marker.offset = l.offset;
      marker.stream = "event";
      marker.ts_ms = l.ts_ms;
      marker.text = OutputLimitMarker(budget.limit());
      budget.MarkerKept(marker.text);
      limit_event = marker.text;
      kept.push_back(std::move(marker));
    } else {
      dropped = true;
    }
    reached = budget.reached();
  }
  GP_RETURN_IF_ERROR(tx.AppendLogs(job_id, kept));
  if (dropped || !limit_event.empty()) {
    GP_RETURN_IF_ERROR(tx.SkipLogs(LogSkip{job_id, attempt_id, rank, last, limit_event, now_ms}));
  }
  return kept;
}

std::string PoolEventsStream(int64_t job_id) { return std::to_string(job_id) + ".pool"; }

Status AppendPoolEvent(Tx& tx, int64_t job_id, const std::string& text, int64_t now_ms) {
  const std::string stream_id = PoolEventsStream(job_id);
  GP_ASSIGN_OR_RETURN(auto stream, tx.GetLogStream(stream_id, 0));
  LogLine l;
  l.attempt_id = stream_id;
  l.offset = (stream ? stream->last_offset : -1) + 1;
  l.stream = "event";
  l.ts_ms = now_ms;
  l.text = text;
  return tx.AppendLogs(job_id, {l});
}

Result<LogPage> ReadLogPage(Tx& tx, int64_t job_id, int64_t after_cursor, int32_t limit) {
  LogPage page;
  GP_ASSIGN_OR_RETURN(page.removed, tx.GetLogRemoval(job_id));
  if (page.removed) return page;
  GP_ASSIGN_OR_RETURN(page.lines, tx.ReadLogs(job_id, after_cursor, limit));
  return page;
}

Result<JobOutput> SummarizeJobOutput(Tx& tx, int64_t job_id) {
  JobOutput out;
  GP_ASSIGN_OR_RETURN(out.removed, tx.GetLogRemoval(job_id));
  if (out.removed) {
    out.lines = out.removed->lines;
    out.bytes = out.removed->bytes;
    out.stored_bytes = out.removed->stored_bytes;
    return out;
  }
  GP_ASSIGN_OR_RETURN(auto streams, tx.ListLogStreams(job_id));
  for (LogStream& s : streams) {
    out.lines += s.lines;
    out.bytes += s.bytes;
    out.stored_bytes += s.stored_bytes;
    if (s.limit_reached_ms > 0) out.limited.push_back(std::move(s));
  }
  return out;
}

std::string DescribeRemoval(const LogRemoval& r) {
  return "the output of job " + std::to_string(r.job_id) + " was removed on " +
         FormatTimestampMs(r.removed_ms) + ": " + r.reason;
}

std::optional<LogRemovalCause> LogRemovalReason(const LogOptions& options, const JobLogSize& job,
                                                int64_t stored_bytes, int64_t now_ms) {
  if (job.finished_ms + options.retention_ms <= now_ms) {
    return LogRemovalCause{false, "the job ended more than " +
                                      FormatDurationMs(options.retention_ms) +
                                      " ago (the server's --log-retention)"};
  }
  if (stored_bytes > options.budget_bytes) {
    return LogRemovalCause{true, "the logs of all jobs held " + FormatBytes(stored_bytes) +
                                     ", more than the server's --log-budget of " +
                                     FormatBytes(options.budget_bytes) +
                                     "; the logs of the jobs that ended first go first"};
  }
  return std::nullopt;
}

Result<bool> LogCollector::Step(LogGcStats& stats) {
  const int64_t now = clock_.NowMs();
  LogGcStats step;
  bool more = false;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    step = {};
    GP_ASSIGN_OR_RETURN(LogTotals totals, tx.GetLogTotals());
    GP_ASSIGN_OR_RETURN(auto ended, tx.ListEndedJobLogs(kJobsPerStep));
    int64_t stored = totals.stored_bytes;
    for (const JobLogSize& job : ended) {
      auto cause = LogRemovalReason(options_, job, stored, now);
      if (!cause) break;
      GP_RETURN_IF_ERROR(tx.RemoveJobLogs(job.job_id, now, cause->reason));
      stored -= job.stored_bytes;
      ++step.jobs_removed;
      ++(cause->budget ? step.by_budget : step.by_retention);
      step.lines_removed += job.lines;
      step.bytes_removed += job.stored_bytes;
    }
    if (step.jobs_removed > 0) {
      more = true;  // more to remove, or at least their chunks to free
      return Status::Ok();
    }
    GP_ASSIGN_OR_RETURN(step.chunks_freed, tx.DeleteRemovedLogChunks(kChunksPerStep));
    more = step.chunks_freed > 0;
    return Status::Ok();
  }));
  stats.jobs_removed += step.jobs_removed;
  stats.by_retention += step.by_retention;
  stats.by_budget += step.by_budget;
  stats.lines_removed += step.lines_removed;
  stats.bytes_removed += step.bytes_removed;
  stats.chunks_freed += step.chunks_freed;
  return more;
}

Result<LogTotals> LogCollector::Totals() {
  LogTotals totals;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(totals, tx.GetLogTotals());
    return Status::Ok();
  }));
  return totals;
}

void LogGc::Collect(std::function<void(Result<LogGcStats>)> done) {
  waiting_.push_back(std::move(done));
  if (waiting_.size() > 1) return;  // the collection under way answers it too
  stats_ = {};
  loop_.Post([this] { Next(); });
}

void LogGc::Next() {
  auto more = collector_.Step(stats_);
  if (more.ok() && *more) {
    // One step per turn of the loop: requests and agents go in between.
    loop_.Post([this] { Next(); });
    return;
  }
  Result<LogGcStats> result = LogGcStats{};
  if (!more.ok()) {
    result = more.status();
  } else if (auto kept = collector_.Totals(); !kept.ok()) {
    result = kept.status();
  } else {
    stats_.kept = *kept;
    result = stats_;
  }
  auto waiting = std::move(waiting_);
  waiting_.clear();
  for (auto& w : waiting) w(result);
}

}  // namespace gpupool::server
