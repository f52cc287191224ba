// How the SQL stores' rows and JSON columns become records and back: the
// column lists their SELECTs use, a reader per table that decodes one row
// (a row that cannot be decoded is Internal naming the table, the row's
// key and the column), and the JSON encoders their writes use. Internal to
// the SQL stores (sql_tx_*.cpp, sql_logs.cpp).
//
// Threading: stateless; any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "model/job.h"
#include "model/node.h"
#include "store/sql_query.h"
#include "store/store.h"

namespace gpupool::sql_rows {

using json = nlohmann::json;

// JSON text for a column. Invalid UTF-8 (possible in user-supplied env values
// or labels) is replaced rather than thrown on.
std::string Dump(const json& j);
// Parses a JSON column; a failure names the table, key and column.
Result<json> ParseColumn(const std::string& text, std::string_view where);
std::string RowName(std::string_view table, std::string_view key);

json GpusToJson(const std::vector<GpuInfo>& gpus);
// Throws json::exception on a wrong shape; the caller converts.
std::vector<GpuInfo> GpusFromJson(const json& a);

// Decodes a JSON column with `fn`, turning shape errors into Internal.
template <typename T, typename Fn>
Result<T> DecodeColumn(const std::string& text, const std::string& where, Fn fn) {
  GP_ASSIGN_OR_RETURN(json j, ParseColumn(text, where));
  try {
    return fn(j);
  } catch (const json::exception& e) {
    return Status::Internal(where + ": " + e.what());
  }
}

inline constexpr std::string_view kJobColumns =
    "id, owner, state, reason, exit_code, attempts, current_attempt, created_ms, updated_ms, "
    "started_ms, finished_ms, spec, last_preempted_ms, front, restarts, input_bytes";
inline constexpr std::string_view kAttemptColumns =
    "id, job_id, number, node_id, gpu_uuids, state, exit_code, reason, created_ms, started_ms, "
    "finished_ms, gpu_milli, gpu_memory_mib, preempt_ms, preempt_for_job, last_checkpoint_ms, "
    "gang";
inline constexpr std::string_view kCheckpointColumns =
    "job_id, number, attempt_id, manifest, created_ms, bytes, files";
inline constexpr std::string_view kNodeColumns =
    "id, name, state, gpus, cpu_milli, memory_mib, driver_version, cuda_version, agent_version, "
    "labels, registered_ms, last_seen_ms, owner_group, lending";

// A gang attempt's ranks, rendezvous and teardown (the `gang` column); ""
// for every other attempt.
std::string GangColumn(const Attempt& a);

// One row of each table, in the column order above (tokens, users, groups,
// audit, credentials, quotas and node events: the order their SELECTs name).
Result<Job> ReadJob(const Query& q);
Result<Attempt> ReadAttempt(const Query& q);
Result<Checkpoint> ReadCheckpoint(const Query& q);
Result<Node> ReadNode(const Query& q);
Result<TokenRecord> ReadToken(const Query& q);
Result<UserRecord> ReadUser(const Query& q);
Result<GroupRecord> ReadGroup(const Query& q);
Result<AuditEntry> ReadAudit(const Query& q);
Result<AgentCredential> ReadAgentCredential(const Query& q);
Result<StorageHolderKind> ReadHolderKind(const std::string& text, std::string_view table);
Result<StorageQuota> ReadStorageQuota(const Query& q);
Result<NodeEvent> ReadNodeEvent(const Query& q);

template <typename T>
using Reader = Result<T> (*)(const Query&);

// Steps `q` to the end, decoding every row.
template <typename T>
Result<std::vector<T>> ReadAll(Query& q, Reader<T> read) {
  std::vector<T> out;
  while (true) {
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    GP_ASSIGN_OR_RETURN(T item, read(q));
    out.push_back(std::move(item));
  }
  return out;
}

// Steps `q` once, decoding the row if there is one.
template <typename T>
Result<std::optional<T>> ReadOne(Query& q, Reader<T> read) {
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::optional<T>();
  GP_ASSIGN_OR_RETURN(T item, read(q));
  return std::optional<T>(std::move(item));
}

// "INSERT INTO table (columns) VALUES (?1, ...) ON CONFLICT (keys) DO UPDATE
// SET" every other column: insert or replace by key, in both dialects.
// `columns` and `keys` are comma-separated; keys must be among the columns.
std::string UpsertSql(std::string_view table, std::string_view columns, std::string_view keys);

// Runs an INSERT ... RETURNING id; the id.
inline Result<int64_t> RunReturningId(Query& q) {
  GP_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return Status::Internal("an INSERT ... RETURNING id returned no row");
  const int64_t id = q.Int(0);
  GP_ASSIGN_OR_RETURN(bool more, q.Step());
  (void)more;
  return id;
}

}  // namespace gpupool::sql_rows
