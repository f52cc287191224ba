#include "store/sql_rows.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/job_spec.h"

namespace gpupool::sql_rows {
namespace {

Status ReadGangColumn(const std::string& text, const std::string& row, Attempt& a) {
  if (text.empty()) return Status::Ok();
  GP_ASSIGN_OR_RETURN(json j,
                      DecodeColumn<json>(text, row + ": gang", [](const json& v) { return v; }));
  try {
    for (const json& r : j.at("ranks")) {
      AttemptRank rank;
      rank.rank = r.at("rank").get<int32_t>();
      rank.node_id = r.at("node_id").get<std::string>();
      rank.gpu_uuids = r.at("gpu_uuids").get<std::vector<std::string>>();
      auto state = ParseAttemptState(r.at("state").get<std::string>());
      if (!state.ok()) return Status::Internal(row + ": gang: " + state.status().message());
      rank.state = *state;
      if (r.contains("exit_code")) rank.exit_code = r.at("exit_code").get<int32_t>();
      rank.reason = r.at("reason").get<std::string>();
      rank.finished_ms = r.at("finished_ms").get<int64_t>();
      a.ranks.push_back(std::move(rank));
    }
    a.master_addr = j.at("master_addr").get<std::string>();
    a.master_port = j.at("master_port").get<int32_t>();
    a.gang_stop_ms = j.at("stop_ms").get<int64_t>();
    a.gang_stop_rank = j.at("stop_rank").get<int32_t>();
  } catch (const json::exception& e) {
    return Status::Internal(row + ": gang: " + e.what());
  }
  return Status::Ok();
}

}  // namespace

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

Result<json> ParseColumn(const std::string& text, std::string_view where) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Internal(std::string(where) + ": invalid JSON");
  return j;
}

std::string RowName(std::string_view table, std::string_view key) {
  return std::string(table) + " row " + std::string(key);
}

json GpusToJson(const std::vector<GpuInfo>& gpus) {
  json a = json::array();
  for (const GpuInfo& g : gpus) {
    a.push_back({{"index", g.index},
                 {"uuid", g.uuid},
                 {"name", g.name},
                 {"memory_mib", g.memory_mib},
                 {"cc_major", g.cc_major},
                 {"cc_minor", g.cc_minor},
                 {"simulated", g.simulated},
                 {"minor_number", g.minor_number}});
    if (g.IsMig()) {
      a.back()["parent_uuid"] = g.parent_uuid;
      a.back()["mig_profile"] = g.mig_profile;
      a.back()["mig_slices"] = g.mig_slices;
      a.back()["mig_gpu_instance"] = g.mig_gpu_instance;
      a.back()["mig_compute_instance"] = g.mig_compute_instance;
    }
  }
  return a;
}

std::vector<GpuInfo> GpusFromJson(const json& a) {
  std::vector<GpuInfo> gpus;
  for (const json& g : a.get_ref<const json::array_t&>()) {
    GpuInfo info;
    info.index = g.at("index").get<int32_t>();
    info.uuid = g.at("uuid").get<std::string>();
    info.name = g.at("name").get<std::string>();
    info.memory_mib = g.at("memory_mib").get<int64_t>();
    info.cc_major = g.at("cc_major").get<int32_t>();
    info.cc_minor = g.at("cc_minor").get<int32_t>();
    info.simulated = g.at("simulated").get<bool>();
    info.minor_number = g.value("minor_number", int32_t{-1});  // absent in older rows
    // MIG instances only; absent for whole GPUs and in older rows.
    info.parent_uuid = g.value("parent_uuid", std::string());
    info.mig_profile = g.value("mig_profile", std::string());
    info.mig_slices = g.value("mig_slices", int32_t{0});
    info.mig_gpu_instance = g.value("mig_gpu_instance", int32_t{-1});
    info.mig_compute_instance = g.value("mig_compute_instance", int32_t{-1});
    gpus.push_back(std::move(info));
  }
  return gpus;
}

Result<Job> ReadJob(const Query& q) {
  Job job;
  job.id = q.Int(0);
  std::string row = RowName("jobs", std::to_string(job.id));
  job.owner = q.Text(1);
  auto state = ParseJobState(q.Text(2));
  if (!state.ok()) return Status::Internal(row + ": state: " + state.status().message());
  job.state = *state;
  job.reason = q.Text(3);
  job.exit_code = q.OptInt32(4);
  job.attempts = static_cast<int32_t>(q.Int(5));
  job.current_attempt = q.Text(6);
  job.created_ms = q.Int(7);
  job.updated_ms = q.Int(8);
  job.started_ms = q.Int(9);
  job.finished_ms = q.Int(10);
  std::string where = row + ": spec";
  GP_ASSIGN_OR_RETURN(json spec_json, ParseColumn(q.Text(11), where));
  Result<JobSpec> spec = [&]() -> Result<JobSpec> {
    try {
      // Stored jobs were accepted under their release's limits: load them
      // under the most generous, so a tightened limit never loses a job.
      return JobSpecFromJson(spec_json, kStoredLimits);
    } catch (const json::exception& e) {
      return Status::Internal(e.what());
    }
  }();
  if (!spec.ok()) return Status::Internal(where + ": " + spec.status().message());
  job.spec = std::move(spec).value();
  if (!q.IsNull(12)) job.last_preempted_ms = q.Int(12);
  job.front = q.Int(13) != 0;
  job.restarts = static_cast<int32_t>(q.Int(14));
  job.input_bytes = q.Int(15);
  return job;
}

std::string GangColumn(const Attempt& a) {
  if (a.ranks.empty() && a.master_port == 0 && a.gang_stop_ms == 0) return "";
  json ranks = json::array();
  for (const AttemptRank& r : a.ranks) {
    json j = {{"rank", r.rank},           {"node_id", r.node_id},
              {"gpu_uuids", r.gpu_uuids}, {"state", AttemptStateName(r.state)},
              {"reason", r.reason},       {"finished_ms", r.finished_ms}};
    if (r.exit_code) j["exit_code"] = *r.exit_code;
    ranks.push_back(std::move(j));
  }
  return Dump(json{{"ranks", std::move(ranks)},
                   {"master_addr", a.master_addr},
                   {"master_port", a.master_port},
                   {"stop_ms", a.gang_stop_ms},
                   {"stop_rank", a.gang_stop_rank}});
}

Result<Attempt> ReadAttempt(const Query& q) {
  Attempt a;
  a.id = q.Text(0);
  std::string row = RowName("attempts", a.id);
  a.job_id = q.Int(1);
  a.number = static_cast<int32_t>(q.Int(2));
  a.node_id = q.Text(3);
  GP_ASSIGN_OR_RETURN(a.gpu_uuids, DecodeColumn<std::vector<std::string>>(
                                       q.Text(4), row + ": gpu_uuids", [](const json& j) {
                                         return j.get<std::vector<std::string>>();
                                       }));
  auto state = ParseAttemptState(q.Text(5));
  if (!state.ok()) return Status::Internal(row + ": state: " + state.status().message());
  a.state = *state;
  a.exit_code = q.OptInt32(6);
  a.reason = q.Text(7);
  a.created_ms = q.Int(8);
  a.started_ms = q.Int(9);
  a.finished_ms = q.Int(10);
  a.gpu_milli = static_cast<int32_t>(q.Int(11));
  a.gpu_memory_mib = q.Int(12);
  a.preempt_ms = q.Int(13);
  a.preempt_for_job = q.Int(14);
  a.last_checkpoint_ms = q.Int(15);
  GP_RETURN_IF_ERROR(ReadGangColumn(q.Text(16), row, a));
  return a;
}

Result<Checkpoint> ReadCheckpoint(const Query& q) {
  Checkpoint c;
  c.job_id = q.Int(0);
  c.number = q.Int(1);
  c.attempt_id = q.Text(2);
  c.manifest = q.Text(3);
  c.created_ms = q.Int(4);
  c.bytes = q.Int(5);
  c.files = q.Int(6);
  return c;
}

Result<Node> ReadNode(const Query& q) {
  Node n;
  n.id = q.Text(0);
  std::string row = RowName("nodes", n.id);
  n.name = q.Text(1);
  auto state = ParseNodeState(q.Text(2));
  if (!state.ok()) return Status::Internal(row + ": state: " + state.status().message());
  n.state = *state;
  GP_ASSIGN_OR_RETURN(n.gpus,
                      DecodeColumn<std::vector<GpuInfo>>(q.Text(3), row + ": gpus", GpusFromJson));
  n.cpu_milli = q.Int(4);
  n.memory_mib = q.Int(5);
  n.driver_version = q.Text(6);
  n.cuda_version = q.Text(7);
  n.agent_version = q.Text(8);
  using Labels = std::map<std::string, std::string>;
  GP_ASSIGN_OR_RETURN(n.labels,
                      DecodeColumn<Labels>(q.Text(9), row + ": labels",
                                           [](const json& j) { return j.get<Labels>(); }));
  n.registered_ms = q.Int(10);
  n.last_seen_ms = q.Int(11);
  n.owner_group = q.Text(12);
  if (std::string lending = q.Text(13); !lending.empty()) {
    GP_ASSIGN_OR_RETURN(json j, ParseColumn(lending, row + ": lending"));
    auto l = NodeLendingFromJson(j, "lending");
    if (!l.ok()) return Status::Internal(row + ": " + l.status().message());
    n.lending = *std::move(l);
  }
  return n;
}

Result<TokenRecord> ReadToken(const Query& q) {
  return TokenRecord{q.Text(0), q.Text(1),     q.Text(2), q.Int(3),
                     q.Int(4),  q.Int(5) != 0, q.Text(6), q.Text(7)};
}

Result<UserRecord> ReadUser(const Query& q) {
  return UserRecord{q.Text(0), q.Text(1), q.Text(2), q.Int(3) != 0, q.Int(4)};
}

Result<GroupRecord> ReadGroup(const Query& q) {
  GroupRecord g;
  g.name = q.Text(0);
  using Strings = std::vector<std::string>;
  auto strings = [](const json& j) { return j.get<Strings>(); };
  GP_ASSIGN_OR_RETURN(
      g.members,
      DecodeColumn<Strings>(q.Text(1), RowName("user_groups", g.name) + ": members", strings));
  g.shared_jobs = q.Int(2) != 0;
  g.created_ms = q.Int(3);
  return g;
}

Result<AuditEntry> ReadAudit(const Query& q) {
  return AuditEntry{q.Int(0),  q.Int(1),  q.Text(2), q.Text(3),
                    q.Text(4), q.Text(5), q.Text(6), q.Int(7) != 0};
}

Result<AgentCredential> ReadAgentCredential(const Query& q) {
  return AgentCredential{q.Text(0), q.Text(1), q.Text(2),     q.Text(3),
                         q.Text(4), q.Int(5),  q.Int(6) != 0, q.Int(7)};
}

Result<StorageHolderKind> ReadHolderKind(const std::string& text, std::string_view table) {
  auto kind = ParseStorageHolderKind(text);
  if (!kind.ok()) return Status::Internal(std::string(table) + ": " + kind.status().message());
  return *kind;
}

Result<StorageQuota> ReadStorageQuota(const Query& q) {
  StorageQuota out;
  GP_ASSIGN_OR_RETURN(out.holder.kind, ReadHolderKind(q.Text(0), "storage_quotas"));
  out.holder.name = q.Text(1);
  out.bytes = q.Int(2);
  out.set_ms = q.Int(3);
  return out;
}

Result<NodeEvent> ReadNodeEvent(const Query& q) {
  NodeEvent e;
  e.id = q.Int(0);
  std::string row = RowName("node_events", std::to_string(e.id));
  e.node_id = q.Text(1);
  e.ts_ms = q.Int(2);
  e.kind = q.Text(3);
  e.reason = q.Text(4);
  using Strings = std::vector<std::string>;
  auto strings = [](const json& j) { return j.get<Strings>(); };
  GP_ASSIGN_OR_RETURN(e.gpus, DecodeColumn<Strings>(q.Text(5), row + ": gpus", strings));
  GP_ASSIGN_OR_RETURN(e.attempts, DecodeColumn<Strings>(q.Text(6), row + ": attempts", strings));
  return e;
}

std::string UpsertSql(std::string_view table, std::string_view columns, std::string_view keys) {
  auto split = [](std::string_view list) {
    std::vector<std::string> out;
    for (size_t at = 0; at <= list.size();) {
      size_t end = list.find(',', at);
      if (end == std::string_view::npos) end = list.size();
      std::string_view name = list.substr(at, end - at);
      while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
      while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
      out.emplace_back(name);
      at = end + 1;
    }
    return out;
  };
  const std::vector<std::string> cols = split(columns), key = split(keys);
  std::string sql =
      "INSERT INTO " + std::string(table) + " (" + std::string(columns) + ") VALUES (";
  for (size_t i = 0; i < cols.size(); ++i) sql += (i ? ", ?" : "?") + std::to_string(i + 1);
  sql += ") ON CONFLICT (" + std::string(keys) + ") DO UPDATE SET ";
  bool first = true;
  for (const std::string& c : cols) {
    if (std::find(key.begin(), key.end(), c) != key.end()) continue;
    sql += (first ? "" : ", ") + c + " = excluded." + c;
    first = false;
  }
  return sql;
}

}  // namespace gpupool::sql_rows
