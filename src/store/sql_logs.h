// SqlLogs: the SQLite store's job logs (the log methods of store/store.h
// Tx), in bounded chunks rather than a row per line. Internal to the SQLite
// store: SqlTx delegates to it inside its transaction.
//
// Tables (schema version 7, kLogSchemaV7):
//   log_chunks   runs of one attempt rank's lines, packed (store/log_chunk.h),
//                at most about kLogChunkBytes each, zstd-compressed (unless
//                small or incompressible); a rank's newest chunk, until it
//                is full, is unpacked and rewritten with the next lines. The
//                chunks of a job's ranks overlap in cursors; a read merges
//                them.
//   log_streams  per attempt rank: last offset taken, lines, bytes
//                (LogLineCost), stored bytes, the output limit's marker
//   log_jobs     per job: the totals, when the job ended (filled in by
//                ListEnded), and when and why its logs were removed
//   log_cursor   the last cursor handed out (cursors are never reused; the
//                migration continues from the v6 logs table's)
// A removed job's chunks are freed later, a bounded number per call
// (DeleteRemovedChunks), so removing a large log never holds the database
// for long.
//
// Threading: as SqliteStore; use inside a transaction only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/sql_query.h"
#include "store/store.h"

namespace gpupool {

// Lines are packed into a chunk until it holds this many bytes.
inline constexpr int64_t kLogChunkBytes = 64 * 1024;

inline constexpr const char* kLogSchemaV7 = R"sql(
CREATE TABLE log_jobs (
  job_id         INTEGER PRIMARY KEY REFERENCES jobs(id),
  finished_ms    INTEGER NOT NULL,
  lines          INTEGER NOT NULL,
  bytes          INTEGER NOT NULL,
  stored_bytes   INTEGER NOT NULL,
  removed_ms     INTEGER NOT NULL,
  removed_reason TEXT NOT NULL,
  freed          INTEGER NOT NULL
);
CREATE INDEX log_jobs_age ON log_jobs(removed_ms, finished_ms, job_id);
CREATE INDEX log_jobs_unfreed ON log_jobs(job_id) WHERE removed_ms > 0 AND freed = 0;

CREATE TABLE log_streams (
  attempt_id       TEXT NOT NULL,
  rank             INTEGER NOT NULL,
  job_id           INTEGER NOT NULL REFERENCES jobs(id),
  last_offset      INTEGER NOT NULL,
  lines            INTEGER NOT NULL,
  bytes            INTEGER NOT NULL,
  stored_bytes     INTEGER NOT NULL,
  limit_reached_ms INTEGER NOT NULL,
  limit_event      TEXT NOT NULL,
  PRIMARY KEY (attempt_id, rank)
) WITHOUT ROWID;
CREATE INDEX log_streams_job ON log_streams(job_id);

CREATE TABLE log_chunks (
  id           INTEGER PRIMARY KEY,
  job_id       INTEGER NOT NULL,
  attempt_id   TEXT NOT NULL,
  rank         INTEGER NOT NULL,
  first_cursor INTEGER NOT NULL,
  last_cursor  INTEGER NOT NULL,
  last_offset  INTEGER NOT NULL,
  last_ts_ms   INTEGER NOT NULL,
  lines        INTEGER NOT NULL,
  raw_bytes    INTEGER NOT NULL,
  zstd         INTEGER NOT NULL,
  data         BLOB NOT NULL
);
CREATE INDEX log_chunks_job_cursor ON log_chunks(job_id, first_cursor, last_cursor);
CREATE INDEX log_chunks_stream ON log_chunks(attempt_id, rank, last_cursor);

CREATE TABLE log_cursor (
  id   INTEGER PRIMARY KEY CHECK (id = 1),
  last INTEGER NOT NULL
);
INSERT INTO log_cursor (id, last) VALUES (1, MAX(
  COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'logs'), 0),
  COALESCE((SELECT MAX(cursor) FROM logs), 0)));
)sql";

// The second half of the v7 migration: packs every row of the v6 logs
// table into chunks, keeping its cursor, and drops the table.
Status MigrateLogsToChunks(SqlConn& conn);

class SqlLogs {
 public:
  explicit SqlLogs(SqlConn& conn) : conn_(conn) {}

  Status Append(int64_t job_id, const std::vector<LogLine>& lines);
  Result<std::vector<LogLine>> Read(int64_t job_id, int64_t after_cursor, int32_t limit);
  Result<int64_t> LastOffset(const std::string& attempt_id, int32_t rank);
  Result<std::optional<LogStream>> GetStream(const std::string& attempt_id, int32_t rank);
  Result<std::vector<LogStream>> ListStreams(int64_t job_id);
  Status Skip(const LogSkip& skip);
  Result<LogTotals> Totals();
  Result<std::vector<JobLogSize>> ListEnded(int32_t limit);
  Status Remove(int64_t job_id, int64_t now_ms, const std::string& reason);
  Result<std::optional<LogRemoval>> GetRemoval(int64_t job_id);
  Result<int64_t> DeleteRemovedChunks(int64_t max_chunks);

 private:
  SqlConn& conn_;
};

}  // namespace gpupool
