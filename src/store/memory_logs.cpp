// MemoryStore's logs facet (store/memory_tables.h). A job's lines are kept
// in one vector by cursor (cursors grow with every append, so appending
// keeps it sorted); streams and totals are kept as SQLite's log_streams and
// log_jobs keep them, so every count matches.
#include <algorithm>
#include <limits>

#include "model/job_output.h"
#include "store/memory_store.h"
#include "store/memory_tables.h"

namespace gpupool {
namespace {

// What a line takes in memory, roughly: its strings and its fixed fields.
int64_t LineBytes(const LogLine& l) {
  return static_cast<int64_t>(l.text.size() + l.stream.size() + l.attempt_id.size() + 40);
}

LogTotals Plus(LogTotals t, int64_t jobs, int64_t lines, int64_t bytes, int64_t stored) {
  t.jobs += jobs;
  t.lines += lines;
  t.bytes += bytes;
  t.stored_bytes += stored;
  return t;
}

}  // namespace

Result<MemoryJobLogs*> MemoryTx::OpenJobLogs(int64_t job_id) {
  auto it = s_.log_jobs.find(job_id);
  if (it == s_.log_jobs.end()) {
    if (s_.jobs.count(job_id) == 0) {
      return Status::NotFound("logs of job " + std::to_string(job_id) + ": the job does not exist");
    }
    j_.Put(s_.log_jobs, job_id, MemoryJobLogs{});
    j_.Set(s_.log_totals, Plus(s_.log_totals, 1, 0, 0, 0));
    it = s_.log_jobs.find(job_id);
  }
  return it->second.removed_ms == 0 ? &it->second : nullptr;
}

void MemoryTx::PutLogStream(const LogStream& s) {
  auto key = std::pair(s.attempt_id, s.rank);
  auto it = s_.log_streams.find(key);
  if (it != s_.log_streams.end() && it->second.job_id != s.job_id) {
    j_.Remove(s_.log_streams_by_job, std::tuple(it->second.job_id, s.attempt_id, s.rank));
  }
  j_.Insert(s_.log_streams_by_job, std::tuple(s.job_id, s.attempt_id, s.rank));
  j_.Put(s_.log_streams, key, s);
}

Status MemoryTx::AppendLogs(int64_t job_id, const std::vector<LogLine>& lines) {
  if (lines.empty()) return Status::Ok();
  GP_ASSIGN_OR_RETURN(MemoryJobLogs * logs, OpenJobLogs(job_id));
  if (logs == nullptr) return Status::Ok();  // its logs were removed: nothing comes back
  int64_t cursor = s_.last_log_cursor;
  std::map<std::pair<std::string, int32_t>, LogStream> streams;
  std::vector<LogLine> added;
  int64_t bytes = 0, stored = 0;
  for (const LogLine& l : lines) {
    auto key = std::pair(l.attempt_id, l.rank);
    auto it = streams.find(key);
    if (it == streams.end()) {
      auto old = s_.log_streams.find(key);
      LogStream s;
      if (old != s_.log_streams.end()) {
        s = old->second;
      } else {
        s.attempt_id = l.attempt_id;
        s.rank = l.rank;
      }
      s.job_id = job_id;
      it = streams.emplace(key, std::move(s)).first;
    }
    LogStream& s = it->second;
    if (l.offset <= s.last_offset) continue;  // a resend
    LogLine line = l;
    line.cursor = ++cursor;
    const int64_t cost = LogLineCost(l.text), held = LineBytes(l);
    s.last_offset = l.offset;
    ++s.lines;
    s.bytes += cost;
    s.stored_bytes += held;
    bytes += cost;
    stored += held;
    added.push_back(std::move(line));
  }
  if (added.empty()) return Status::Ok();  // every line was a resend
  for (const auto& [key, s] : streams) PutLogStream(s);
  const size_t before = logs->lines.size();
  logs->lines.insert(logs->lines.end(), std::make_move_iterator(added.begin()),
                     std::make_move_iterator(added.end()));
  j_.Record([logs, before] { logs->lines.resize(before); });
  const auto n = static_cast<int64_t>(logs->lines.size() - before);
  j_.Set(logs->lines_count, logs->lines_count + n);
  j_.Set(logs->bytes, logs->bytes + bytes);
  j_.Set(logs->stored_bytes, logs->stored_bytes + stored);
  j_.Set(s_.log_totals, Plus(s_.log_totals, 0, n, bytes, stored));
  j_.Set(s_.last_log_cursor, cursor);
  return Status::Ok();
}

Result<std::vector<LogLine>> MemoryTx::ReadLogs(int64_t job_id, int64_t after_cursor,
                                                int32_t limit) {
  std::vector<LogLine> out;
  auto it = s_.log_jobs.find(job_id);
  if (limit <= 0 || it == s_.log_jobs.end() || it->second.removed_ms != 0) return out;
  const std::vector<LogLine>& lines = it->second.lines;
  auto first = std::upper_bound(lines.begin(), lines.end(), after_cursor,
                                [](int64_t cursor, const LogLine& l) { return cursor < l.cursor; });
  for (auto l = first; l != lines.end() && out.size() < static_cast<size_t>(limit); ++l) {
    out.push_back(*l);
  }
  return out;
}

Result<int64_t> MemoryTx::LastLogOffset(const std::string& attempt_id, int32_t rank) {
  auto it = s_.log_streams.find(std::pair(attempt_id, rank));
  return it == s_.log_streams.end() ? int64_t{-1} : it->second.last_offset;
}

Result<std::optional<LogStream>> MemoryTx::GetLogStream(const std::string& attempt_id,
                                                        int32_t rank) {
  auto it = s_.log_streams.find(std::pair(attempt_id, rank));
  if (it == s_.log_streams.end()) return std::optional<LogStream>();
  return std::optional<LogStream>(it->second);
}

Result<std::vector<LogStream>> MemoryTx::ListLogStreams(int64_t job_id) {
  std::vector<LogStream> out;
  for (auto it = s_.log_streams_by_job.lower_bound(
           std::tuple(job_id, std::string(), std::numeric_limits<int32_t>::min()));
       it != s_.log_streams_by_job.end() && std::get<0>(*it) == job_id; ++it) {
    out.push_back(s_.log_streams.at(std::pair(std::get<1>(*it), std::get<2>(*it))));
  }
  return out;
}

Status MemoryTx::SkipLogs(const LogSkip& skip) {
  GP_ASSIGN_OR_RETURN(MemoryJobLogs * logs, OpenJobLogs(skip.job_id));
  if (logs == nullptr) return Status::Ok();
  auto old = s_.log_streams.find(std::pair(skip.attempt_id, skip.rank));
  LogStream s = SkippedStream(
      old != s_.log_streams.end() ? std::optional<LogStream>(old->second) : std::nullopt, skip);
  PutLogStream(s);
  return Status::Ok();
}

Result<LogTotals> MemoryTx::GetLogTotals() { return s_.log_totals; }

Result<std::vector<JobLogSize>> MemoryTx::ListEndedJobLogs(int32_t limit) {
  std::vector<JobLogSize> out;
  if (limit <= 0) return out;
  // A job is seen ended once, and keeps the end time it was seen with (as
  // SQLite's log_jobs.finished_ms).
  for (auto& [job_id, logs] : s_.log_jobs) {
    if (logs.removed_ms != 0) continue;
    if (logs.finished_ms == 0) {
      auto job = s_.jobs.find(job_id);
      if (job == s_.jobs.end() || !IsTerminal(job->second.state)) continue;
      const Job& j = job->second;
      j_.Set(logs.finished_ms,
             std::max<int64_t>(1, j.finished_ms > 0 ? j.finished_ms : j.updated_ms));
    }
    out.push_back({job_id, logs.finished_ms, logs.lines_count, logs.bytes, logs.stored_bytes});
  }
  std::sort(out.begin(), out.end(), [](const JobLogSize& a, const JobLogSize& b) {
    return std::pair(a.finished_ms, a.job_id) < std::pair(b.finished_ms, b.job_id);
  });
  if (out.size() > static_cast<size_t>(limit)) out.resize(static_cast<size_t>(limit));
  return out;
}

Status MemoryTx::RemoveJobLogs(int64_t job_id, int64_t now_ms, const std::string& reason) {
  auto it = s_.log_jobs.find(job_id);
  if (it == s_.log_jobs.end() || it->second.removed_ms != 0) return Status::Ok();
  MemoryJobLogs& logs = it->second;
  j_.Set(logs.removed_ms, std::max<int64_t>(now_ms, 1));
  j_.Set(logs.removed_reason, reason);
  j_.Set(s_.log_totals,
         Plus(s_.log_totals, -1, -logs.lines_count, -logs.bytes, -logs.stored_bytes));
  j_.Insert(s_.log_jobs_unfreed, job_id);
  for (const LogStream& s : ListLogStreams(job_id).value()) {
    j_.Remove(s_.log_streams_by_job, std::tuple(job_id, s.attempt_id, s.rank));
    j_.Erase(s_.log_streams, std::pair(s.attempt_id, s.rank));
  }
  return Status::Ok();
}

Result<std::optional<LogRemoval>> MemoryTx::GetLogRemoval(int64_t job_id) {
  auto it = s_.log_jobs.find(job_id);
  if (it == s_.log_jobs.end() || it->second.removed_ms == 0) return std::optional<LogRemoval>();
  const MemoryJobLogs& l = it->second;
  return std::optional<LogRemoval>(
      LogRemoval{job_id, l.removed_ms, l.removed_reason, l.lines_count, l.bytes, l.stored_bytes});
}

Result<int64_t> MemoryTx::DeleteRemovedLogChunks(int64_t max_chunks) {
  int64_t freed = 0;
  while (freed < max_chunks && !s_.log_jobs_unfreed.empty()) {
    const int64_t job_id = *s_.log_jobs_unfreed.begin();
    MemoryJobLogs* logs = &s_.log_jobs.at(job_id);
    const int64_t want = max_chunks - freed;
    const auto size = static_cast<int64_t>(logs->lines.size());
    const int64_t chunks = (size + kMemoryLogChunkLines - 1) / kMemoryLogChunkLines;
    const int64_t n = std::min(want, chunks);
    if (n > 0) {
      const int64_t keep = (chunks - n) * kMemoryLogChunkLines;
      std::vector<LogLine> gone(std::make_move_iterator(logs->lines.begin() + keep),
                                std::make_move_iterator(logs->lines.end()));
      logs->lines.resize(static_cast<size_t>(keep));
      if (keep == 0) logs->lines.shrink_to_fit();
      j_.Record([logs, gone = std::move(gone)] {
        logs->lines.insert(logs->lines.end(), gone.begin(), gone.end());
      });
      freed += n;
    }
    if (n < want) {
      j_.Remove(s_.log_jobs_unfreed, job_id);
      j_.Set(logs->freed, true);
    }
  }
  return freed;
}

}  // namespace gpupool
