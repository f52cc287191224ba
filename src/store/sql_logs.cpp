#include "store/sql_logs.h"

#include <algorithm>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <string_view>
#include <utility>

#include "model/job.h"
#include "model/job_output.h"
#include "store/log_chunk.h"

namespace gpupool {
namespace {

constexpr std::string_view kStreamColumns =
    "job_id, attempt_id, rank, last_offset, lines, bytes, stored_bytes, limit_reached_ms, "
    "limit_event";

LogStream ReadStream(const Query& q) {
  LogStream s;
  s.job_id = q.Int(0);
  s.attempt_id = q.Text(1);
  s.rank = static_cast<int32_t>(q.Int(2));
  s.last_offset = q.Int(3);
  s.lines = q.Int(4);
  s.bytes = q.Int(5);
  s.stored_bytes = q.Int(6);
  s.limit_reached_ms = q.Int(7);
  s.limit_event = q.Text(8);
  return s;
}

Status PutStream(SqlConn& conn, const LogStream& s) {
  GP_ASSIGN_OR_RETURN(
      Query q,
      conn.Prepare("INSERT INTO log_streams (job_id, attempt_id, rank, last_offset, lines, bytes, "
                   "stored_bytes, limit_reached_ms, limit_event) "
                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) "
                   "ON CONFLICT (attempt_id, rank) DO UPDATE SET job_id = excluded.job_id, "
                   "last_offset = excluded.last_offset, lines = excluded.lines, "
                   "bytes = excluded.bytes, stored_bytes = excluded.stored_bytes, "
                   "limit_reached_ms = excluded.limit_reached_ms, "
                   "limit_event = excluded.limit_event"));
  q.Bind(1, s.job_id).Bind(2, s.attempt_id).Bind(3, static_cast<int64_t>(s.rank));
  q.Bind(4, s.last_offset).Bind(5, s.lines).Bind(6, s.bytes).Bind(7, s.stored_bytes);
  q.Bind(8, s.limit_reached_ms).Bind(9, s.limit_event);
  return q.Run();
}

// Gives the job its log_jobs row if it has none yet. false: its logs were
// removed (nothing more is stored for it); NotFound: there is no such job.
Result<bool> OpenJob(SqlConn& conn, int64_t job_id) {
  {
    GP_ASSIGN_OR_RETURN(Query q, conn.Prepare("INSERT INTO log_jobs (job_id, finished_ms, lines, "
                                              "bytes, stored_bytes, removed_ms, removed_reason, "
                                              "freed) VALUES (?1, 0, 0, 0, 0, 0, '', 0) "
                                              "ON CONFLICT (job_id) DO NOTHING"));
    q.Bind(1, job_id);
    Status st = q.Run();
    if (!st.ok()) {
      if (q.violated() == SqlConstraint::kForeignKey) {
        return Status::NotFound("logs of job " + std::to_string(job_id) +
                                ": the job does not exist");
      }
      return st;
    }
  }
  GP_ASSIGN_OR_RETURN(Query q, conn.Prepare("SELECT removed_ms FROM log_jobs WHERE job_id = ?1"));
  q.Bind(1, job_id);
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  return row && q.Int(0) == 0;
}

Status AddToJob(SqlConn& conn, int64_t job_id, int64_t lines, int64_t bytes, int64_t stored) {
  GP_ASSIGN_OR_RETURN(Query q, conn.Prepare("UPDATE log_jobs SET lines = lines + ?2, "
                                            "bytes = bytes + ?3, stored_bytes = stored_bytes + ?4 "
                                            "WHERE job_id = ?1"));
  q.Bind(1, job_id).Bind(2, lines).Bind(3, bytes).Bind(4, stored);
  return q.Run();
}

using StreamKey = std::pair<std::string, int32_t>;

// Smaller chunks are stored packed only: compressing gains little there.
constexpr int64_t kMinCompressBytes = 1024;

// Packs one job's lines into chunks: each line goes on in its attempt
// rank's newest chunk while that one has room (a full one is never
// appended to again), else a new chunk starts. Updates the lines' LogStreams (lines, bytes,
// stored_bytes, last_offset) and counts what it added for the job.
class ChunkWriter {
 public:
  ChunkWriter(SqlConn& conn, int64_t job_id) : conn_(conn), job_id_(job_id) {}

  Status Add(const LogLine& l, int64_t cursor, LogStream& stream) {
    StreamKey key(l.attempt_id, l.rank);
    auto it = open_.find(key);
    if (it == open_.end()) {
      Chunk c;
      c.attempt_id = l.attempt_id;
      c.rank = l.rank;
      c.first_cursor = cursor;
      c.stream = &stream;
      // After a chunk of it was filled here, the rank's newest is that one.
      if (!full_.count(key)) GP_RETURN_IF_ERROR(Reopen(c));
      it = open_.emplace(key, std::move(c)).first;
    }
    Chunk& c = it->second;
    PackLogLine(l, cursor, c.last, c.packed);
    ++c.lines;
    int64_t cost = LogLineCost(l.text);
    stream.last_offset = std::max(stream.last_offset, l.offset);
    ++stream.lines;
    stream.bytes += cost;
    ++lines_;
    bytes_ += cost;
    if (static_cast<int64_t>(c.packed.size()) >= kLogChunkBytes) {
      GP_RETURN_IF_ERROR(Flush(c));
      full_.insert(key);
      open_.erase(it);
    }
    return Status::Ok();
  }

  // Writes the chunks being filled.
  Status Finish() {
    for (auto& [key, c] : open_) GP_RETURN_IF_ERROR(Flush(c));
    open_.clear();
    return Status::Ok();
  }

  int64_t lines() const { return lines_; }
  int64_t bytes() const { return bytes_; }
  int64_t stored() const { return stored_; }

 private:
  struct Chunk {
    int64_t id = 0;  // 0: not stored yet
    std::string attempt_id;
    int32_t rank = 0;
    int64_t first_cursor = 0;
    PackState last;
    int64_t lines = 0;
    std::string packed;
    int64_t stored_before = 0;  // what its row held before
    LogStream* stream = nullptr;
  };

  // Continues the rank's newest chunk, when it is not full.
  Status Reopen(Chunk& c) {
    GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT id, first_cursor, last_cursor, "
                                               "last_offset, last_ts_ms, lines, raw_bytes, "
                                               "zstd, data FROM log_chunks WHERE attempt_id = ?1 "
                                               "AND rank = ?2 ORDER BY last_cursor DESC LIMIT 1"));
    q.Bind(1, c.attempt_id).Bind(2, static_cast<int64_t>(c.rank));
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row || q.Int(6) >= kLogChunkBytes) return Status::Ok();
    std::string data = q.Blob(8);
    c.stored_before = static_cast<int64_t>(data.size());
    if (q.Int(7) != 0) {
      GP_ASSIGN_OR_RETURN(data, DecompressLogChunk(data, static_cast<size_t>(q.Int(6))));
    }
    c.id = q.Int(0);
    c.first_cursor = q.Int(1);
    c.last = {q.Int(2), q.Int(3), q.Int(4)};
    c.lines = q.Int(5);
    c.packed = std::move(data);
    return Status::Ok();
  }

  Status Flush(Chunk& c) {
    // Compressed unless it is small or zstd does not shrink it (junk).
    std::string compressed;
    bool zstd = false;
    if (static_cast<int64_t>(c.packed.size()) >= kMinCompressBytes) {
      compressed = CompressLogChunk(c.packed);
      zstd = !compressed.empty() && compressed.size() < c.packed.size();
    }
    const std::string& data = zstd ? compressed : c.packed;
    auto raw = static_cast<int64_t>(c.packed.size());
    if (c.id == 0) {
      GP_ASSIGN_OR_RETURN(
          Query q,
          conn_.Prepare("INSERT INTO log_chunks (job_id, attempt_id, rank, first_cursor, "
                        "last_cursor, last_offset, last_ts_ms, lines, raw_bytes, zstd, data) "
                        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) RETURNING id"));
      q.Bind(1, job_id_).Bind(2, c.attempt_id).Bind(3, static_cast<int64_t>(c.rank));
      q.Bind(4, c.first_cursor).Bind(5, c.last.cursor).Bind(6, c.last.offset);
      q.Bind(7, c.last.ts_ms).Bind(8, c.lines).Bind(9, raw).Bind(10, int64_t{zstd ? 1 : 0});
      q.BindBlob(11, data);
      GP_ASSIGN_OR_RETURN(c.id, sql_rows::RunReturningId(q));
    } else {
      GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("UPDATE log_chunks SET last_cursor = ?2, "
                                                 "last_offset = ?3, last_ts_ms = ?4, lines = ?5, "
                                                 "raw_bytes = ?6, zstd = ?7, data = ?8 "
                                                 "WHERE id = ?1"));
      q.Bind(1, c.id).Bind(2, c.last.cursor).Bind(3, c.last.offset).Bind(4, c.last.ts_ms);
      q.Bind(5, c.lines).Bind(6, raw).Bind(7, int64_t{zstd ? 1 : 0}).BindBlob(8, data);
      GP_RETURN_IF_ERROR(q.Run());
    }
    int64_t delta = static_cast<int64_t>(data.size()) - c.stored_before;
    c.stream->stored_bytes += delta;
    stored_ += delta;
    c.stored_before = static_cast<int64_t>(data.size());
    return Status::Ok();
  }

  SqlConn& conn_;
  int64_t job_id_;
  std::map<StreamKey, Chunk> open_;  // being filled, per attempt rank
  std::set<StreamKey> full_;         // ranks whose newest chunk was filled here
  int64_t lines_ = 0, bytes_ = 0, stored_ = 0;
};

Result<int64_t> LastCursor(SqlConn& conn) {
  GP_ASSIGN_OR_RETURN(Query q, conn.Prepare("SELECT last FROM log_cursor WHERE id = 1"));
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return Status::Internal("log_cursor: the row is missing");
  return q.Int(0);
}

Status SetLastCursor(SqlConn& conn, int64_t cursor) {
  GP_ASSIGN_OR_RETURN(Query q, conn.Prepare("UPDATE log_cursor SET last = ?1 WHERE id = 1"));
  q.Bind(1, cursor);
  return q.Run();
}

}  // namespace

Status SqlLogs::Append(int64_t job_id, const std::vector<LogLine>& lines) {
  if (lines.empty()) return Status::Ok();
  GP_ASSIGN_OR_RETURN(bool open, OpenJob(conn_, job_id));
  if (!open) return Status::Ok();  // its logs were removed: nothing comes back
  GP_ASSIGN_OR_RETURN(int64_t cursor, LastCursor(conn_));
  const int64_t first_cursor = cursor;
  std::map<StreamKey, LogStream> streams;
  ChunkWriter writer(conn_, job_id);
  for (const LogLine& l : lines) {
    auto it = streams.find(StreamKey(l.attempt_id, l.rank));
    if (it == streams.end()) {
      GP_ASSIGN_OR_RETURN(auto stored, GetStream(l.attempt_id, l.rank));
      LogStream s;
      if (stored) {
        s = *std::move(stored);
      } else {
        s.attempt_id = l.attempt_id;
        s.rank = l.rank;
      }
      s.job_id = job_id;
      it = streams.emplace(StreamKey(l.attempt_id, l.rank), std::move(s)).first;
    }
    if (l.offset <= it->second.last_offset) continue;  // a resend
    GP_RETURN_IF_ERROR(writer.Add(l, ++cursor, it->second));
  }
  GP_RETURN_IF_ERROR(writer.Finish());
  if (cursor == first_cursor) return Status::Ok();  // every line was a resend
  for (const auto& [key, s] : streams) GP_RETURN_IF_ERROR(PutStream(conn_, s));
  GP_RETURN_IF_ERROR(AddToJob(conn_, job_id, writer.lines(), writer.bytes(), writer.stored()));
  return SetLastCursor(conn_, cursor);
}

Result<std::vector<LogLine>> SqlLogs::Read(int64_t job_id, int64_t after_cursor, int32_t limit) {
  std::vector<LogLine> out;
  if (limit <= 0) return out;
  GP_ASSIGN_OR_RETURN(auto removed, GetRemoval(job_id));
  if (removed) return out;
  // The chunks of different attempt ranks overlap in cursors (each rank
  // fills its own): they are merged. A line can be handed out once no chunk
  // still to read starts below it.
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT first_cursor, attempt_id, rank, raw_bytes, "
                                             "zstd, data FROM log_chunks WHERE job_id = ?1 AND "
                                             "last_cursor > ?2 ORDER BY first_cursor"));
  q.Bind(1, job_id).Bind(2, after_cursor);
  auto later = [](const LogLine& a, const LogLine& b) { return a.cursor > b.cursor; };
  std::priority_queue<LogLine, std::vector<LogLine>, decltype(later)> pending(later);
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  while (static_cast<int32_t>(out.size()) < limit) {
    if (!pending.empty() && (!row || pending.top().cursor < q.Int(0))) {
      out.push_back(pending.top());
      pending.pop();
      continue;
    }
    if (!row) break;
    std::string attempt_id = q.Text(1);
    auto rank = static_cast<int32_t>(q.Int(2));
    std::string packed = q.Blob(5);
    if (q.Int(4) != 0) {
      GP_ASSIGN_OR_RETURN(packed, DecompressLogChunk(packed, static_cast<size_t>(q.Int(3))));
    }
    GP_ASSIGN_OR_RETURN(auto lines, UnpackLogLines(packed, attempt_id, rank));
    for (LogLine& l : lines) {
      if (l.cursor > after_cursor) pending.push(std::move(l));
    }
    GP_ASSIGN_OR_RETURN(row, q.Step());
  }
  return out;
}

Result<int64_t> SqlLogs::LastOffset(const std::string& attempt_id, int32_t rank) {
  GP_ASSIGN_OR_RETURN(auto s, GetStream(attempt_id, rank));
  return s ? s->last_offset : int64_t{-1};
}

Result<std::optional<LogStream>> SqlLogs::GetStream(const std::string& attempt_id, int32_t rank) {
  static const std::string sql = "SELECT " + std::string(kStreamColumns) +
                                 " FROM log_streams WHERE attempt_id = ?1 AND rank = ?2";
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(sql));
  q.Bind(1, attempt_id).Bind(2, static_cast<int64_t>(rank));
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::optional<LogStream>();
  return std::optional<LogStream>(ReadStream(q));
}

Result<std::vector<LogStream>> SqlLogs::ListStreams(int64_t job_id) {
  static const std::string sql = "SELECT " + std::string(kStreamColumns) +
                                 " FROM log_streams WHERE job_id = ?1 ORDER BY attempt_id, rank";
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(sql));
  q.Bind(1, job_id);
  std::vector<LogStream> out;
  while (true) {
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    out.push_back(ReadStream(q));
  }
  return out;
}

Status SqlLogs::Skip(const LogSkip& skip) {
  GP_ASSIGN_OR_RETURN(bool open, OpenJob(conn_, skip.job_id));
  if (!open) return Status::Ok();
  GP_ASSIGN_OR_RETURN(auto stored, GetStream(skip.attempt_id, skip.rank));
  LogStream s = SkippedStream(std::move(stored), skip);
  return PutStream(conn_, s);
}

Result<LogTotals> SqlLogs::Totals() {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT COUNT(*), COALESCE(SUM(lines), 0), "
                                             "COALESCE(SUM(bytes), 0), "
                                             "COALESCE(SUM(stored_bytes), 0) FROM log_jobs "
                                             "WHERE removed_ms = 0"));
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  LogTotals t;
  if (row) t = {q.Int(0), q.Int(1), q.Int(2), q.Int(3)};
  return t;
}

Result<std::vector<JobLogSize>> SqlLogs::ListEnded(int32_t limit) {
  std::vector<JobLogSize> out;
  if (limit <= 0) return out;
  // Jobs that ended since the last look get their end time (the index
  // orders by it); only rows not known to have ended are looked at.
  static const std::string close_sql =
      "UPDATE log_jobs SET finished_ms = (SELECT CASE WHEN j.finished_ms > 0 THEN "
      "j.finished_ms WHEN j.updated_ms > 1 THEN j.updated_ms ELSE 1 END FROM jobs j WHERE "
      "j.id = log_jobs.job_id) "
      "WHERE removed_ms = 0 AND finished_ms = 0 AND EXISTS (SELECT 1 FROM jobs j WHERE "
      "j.id = log_jobs.job_id AND j.state IN ('" +
      std::string(JobStateName(JobState::kSucceeded)) + "', '" +
      std::string(JobStateName(JobState::kFailed)) + "', '" +
      std::string(JobStateName(JobState::kCancelled)) + "'))";
  GP_ASSIGN_OR_RETURN(Query close, conn_.Prepare(close_sql));
  GP_RETURN_IF_ERROR(close.Run());
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT job_id, finished_ms, lines, bytes, "
                                             "stored_bytes FROM log_jobs WHERE removed_ms = 0 "
                                             "AND finished_ms > 0 ORDER BY finished_ms, job_id "
                                             "LIMIT ?1"));
  q.Bind(1, static_cast<int64_t>(limit));
  while (true) {
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    out.push_back({q.Int(0), q.Int(1), q.Int(2), q.Int(3), q.Int(4)});
  }
  return out;
}

Status SqlLogs::Remove(int64_t job_id, int64_t now_ms, const std::string& reason) {
  {
    GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("UPDATE log_jobs SET removed_ms = ?2, "
                                               "removed_reason = ?3 WHERE job_id = ?1 AND "
                                               "removed_ms = 0"));
    q.Bind(1, job_id).Bind(2, std::max<int64_t>(now_ms, 1)).Bind(3, reason);
    GP_RETURN_IF_ERROR(q.Run());
    if (conn_.Changes() == 0) return Status::Ok();
  }
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("DELETE FROM log_streams WHERE job_id = ?1"));
  q.Bind(1, job_id);
  return q.Run();
}

Result<std::optional<LogRemoval>> SqlLogs::GetRemoval(int64_t job_id) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT removed_ms, removed_reason, lines, bytes, "
                                             "stored_bytes FROM log_jobs WHERE job_id = ?1 AND "
                                             "removed_ms > 0"));
  q.Bind(1, job_id);
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::optional<LogRemoval>();
  return std::optional<LogRemoval>(
      LogRemoval{job_id, q.Int(0), q.Text(1), q.Int(2), q.Int(3), q.Int(4)});
}

Result<int64_t> SqlLogs::DeleteRemovedChunks(int64_t max_chunks) {
  int64_t freed = 0;
  while (freed < max_chunks) {
    int64_t job_id = 0;
    {
      GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT job_id FROM log_jobs WHERE "
                                                 "removed_ms > 0 AND freed = 0 LIMIT 1"));
      GP_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      job_id = q.Int(0);
    }
    int64_t want = max_chunks - freed;
    {
      GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("DELETE FROM log_chunks WHERE id IN (SELECT id "
                                                 "FROM log_chunks WHERE job_id = ?1 LIMIT ?2)"));
      q.Bind(1, job_id).Bind(2, want);
      GP_RETURN_IF_ERROR(q.Run());
    }
    int64_t n = conn_.Changes();
    freed += n;
    if (n < want) {
      GP_ASSIGN_OR_RETURN(Query q,
                          conn_.Prepare("UPDATE log_jobs SET freed = 1 WHERE job_id = ?1"));
      q.Bind(1, job_id);
      GP_RETURN_IF_ERROR(q.Run());
    }
  }
  return freed;
}

namespace {

Status PackV6Rows(SqlConn& conn) {
  // The v6 rows, each job's in cursor order; a run of one attempt rank's
  // lines fills chunks as AppendLogs would, keeping the rows' cursors.
  // Offsets are not checked: v6 kept lines whose offset went backwards.
  int64_t job_id = 0;
  std::optional<ChunkWriter> writer;
  std::map<StreamKey, LogStream> streams;
  auto finish_job = [&]() -> Status {
    if (!writer) return Status::Ok();
    GP_RETURN_IF_ERROR(writer->Finish());
    for (const auto& [key, s] : streams) GP_RETURN_IF_ERROR(PutStream(conn, s));
    GP_RETURN_IF_ERROR(AddToJob(conn, job_id, writer->lines(), writer->bytes(), writer->stored()));
    writer.reset();
    streams.clear();
    return Status::Ok();
  };
  GP_ASSIGN_OR_RETURN(Query q, conn.Prepare("SELECT job_id, attempt_id, rank, \"offset\", stream, "
                                            "ts_ms, text, cursor FROM logs "
                                            "ORDER BY job_id, cursor"));
  while (true) {
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    LogLine l;
    int64_t row_job = q.Int(0);
    l.attempt_id = q.Text(1);
    l.rank = static_cast<int32_t>(q.Int(2));
    l.offset = q.Int(3);
    l.stream = q.Text(4);
    l.ts_ms = q.Int(5);
    l.text = q.Text(6);
    int64_t cursor = q.Int(7);
    if (!writer || row_job != job_id) {
      GP_RETURN_IF_ERROR(finish_job());
      job_id = row_job;
      GP_ASSIGN_OR_RETURN(bool open, OpenJob(conn, job_id));
      (void)open;  // a new table: never removed
      writer.emplace(conn, job_id);
    }
    auto it = streams.find(StreamKey(l.attempt_id, l.rank));
    if (it == streams.end()) {
      LogStream s;
      s.job_id = job_id;
      s.attempt_id = l.attempt_id;
      s.rank = l.rank;
      it = streams.emplace(StreamKey(l.attempt_id, l.rank), std::move(s)).first;
    }
    GP_RETURN_IF_ERROR(writer->Add(l, cursor, it->second));
  }
  GP_RETURN_IF_ERROR(finish_job());
  return Status::Ok();
}

}  // namespace

Status MigrateLogsToChunks(SqlConn& conn) {
  GP_RETURN_IF_ERROR(PackV6Rows(conn));  // its statement on logs is reset on return
  GP_ASSIGN_OR_RETURN(Query drop, conn.Prepare("DROP TABLE logs"));
  return drop.Run();
}

}  // namespace gpupool
