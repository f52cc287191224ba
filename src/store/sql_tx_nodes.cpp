// SqlTx's nodes facet (store/sql_tx.h): nodes, node events, agent
// credentials, the outbox.

#include <string>
#include <utility>
#include <vector>

#include "store/sql_rows.h"
#include "store/sql_tx.h"

namespace gpupool {
namespace {

using namespace ::gpupool::sql_rows;  // NOLINT: the store's row codecs

constexpr const char* kCredentialColumns =
    "node_name, token_hash, cert_serial, cert_fingerprint, owner, enrolled_ms, revoked, "
    "revoked_ms";

}  // namespace

Status SqlTx::PutNode(const Node& n) {
  GP_ASSIGN_OR_RETURN(
      Query q, conn_.Prepare("INSERT INTO nodes (id, name, state, gpus, cpu_milli, memory_mib, "
                             "driver_version, cuda_version, agent_version, labels, "
                             "registered_ms, last_seen_ms, owner_group, lending) "
                             "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
                             "?14) "
                             "ON CONFLICT (id) DO UPDATE SET name = excluded.name, "
                             "state = excluded.state, gpus = excluded.gpus, "
                             "cpu_milli = excluded.cpu_milli, memory_mib = excluded.memory_mib, "
                             "driver_version = excluded.driver_version, "
                             "cuda_version = excluded.cuda_version, "
                             "agent_version = excluded.agent_version, labels = excluded.labels, "
                             "registered_ms = excluded.registered_ms, "
                             "last_seen_ms = excluded.last_seen_ms, "
                             "owner_group = excluded.owner_group, "
                             "lending = excluded.lending"));
  q.Bind(1, n.id)
      .Bind(2, n.name)
      .Bind(3, NodeStateName(n.state))
      .Bind(4, Dump(GpusToJson(n.gpus)))
      .Bind(5, n.cpu_milli)
      .Bind(6, n.memory_mib)
      .Bind(7, n.driver_version)
      .Bind(8, n.cuda_version)
      .Bind(9, n.agent_version)
      .Bind(10, Dump(json(n.labels)))
      .Bind(11, n.registered_ms)
      .Bind(12, n.last_seen_ms)
      .Bind(13, n.owner_group)
      .Bind(14, n.lending ? Dump(NodeLendingToJson(*n.lending)) : std::string());
  Status st = q.Run();
  // The id conflict is resolved by the upsert, so a unique violation can
  // only be the name.
  if (!st.ok() && q.violated() == SqlConstraint::kUnique) {
    return Status::AlreadyExists("node name \"" + n.name + "\" is already used by another node");
  }
  return st;
}

Result<std::optional<Node>> SqlTx::GetNode(const std::string& id) {
  static const std::string sql =
      "SELECT " + std::string(kNodeColumns) + " FROM nodes WHERE id = ?1";
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(sql));
  q.Bind(1, id);
  return ReadOne<Node>(q, ReadNode);
}

Result<std::optional<Node>> SqlTx::GetNodeByName(const std::string& name) {
  static const std::string sql =
      "SELECT " + std::string(kNodeColumns) + " FROM nodes WHERE name = ?1";
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(sql));
  q.Bind(1, name);
  return ReadOne<Node>(q, ReadNode);
}

Result<std::vector<Node>> SqlTx::ListNodes() {
  static const std::string sql =
      "SELECT " + std::string(kNodeColumns) + " FROM nodes ORDER BY name";
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare(sql));
  return ReadAll<Node>(q, ReadNode);
}

Result<int64_t> SqlTx::AppendNodeEvent(const NodeEvent& e) {
  GP_ASSIGN_OR_RETURN(
      Query q, conn_.Prepare("INSERT INTO node_events (node_id, ts_ms, kind, reason, "
                             "gpus, attempts) VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id"));
  q.Bind(1, e.node_id).Bind(2, e.ts_ms).Bind(3, e.kind).Bind(4, e.reason);
  q.Bind(5, Dump(json(e.gpus))).Bind(6, Dump(json(e.attempts)));
  return RunReturningId(q);
}

Result<std::vector<NodeEvent>> SqlTx::ListNodeEvents(const std::string& node_id, int64_t after_id,
                                                     int64_t before_id, int32_t limit) {
  if (limit <= 0) return std::vector<NodeEvent>();
  // ?1 = '' lists every node's events; ?4 = 0: ascending from ?2.
  GP_ASSIGN_OR_RETURN(
      Query q,
      conn_.Prepare(before_id == 0 ? "SELECT id, node_id, ts_ms, kind, reason, gpus, attempts "
                                     "FROM node_events WHERE (?1 = '' OR node_id = ?1) AND id > ?2 "
                                     "AND ?4 = 0 ORDER BY id LIMIT ?3"
                                   : "SELECT id, node_id, ts_ms, kind, reason, gpus, attempts "
                                     "FROM node_events WHERE (?1 = '' OR node_id = ?1) AND id > ?2 "
                                     "AND id < ?4 ORDER BY id DESC LIMIT ?3"));
  q.Bind(1, node_id).Bind(2, after_id).Bind(3, static_cast<int64_t>(limit)).Bind(4, before_id);
  return ReadAll<NodeEvent>(q, ReadNodeEvent);
}

Status SqlTx::PutAgentCredential(const AgentCredential& c) {
  GP_ASSIGN_OR_RETURN(
      Query q, conn_.Prepare(UpsertSql("agent_credentials", kCredentialColumns, "node_name")));
  q.Bind(1, c.node_name).Bind(2, c.token_hash).Bind(3, c.cert_serial).Bind(4, c.cert_fingerprint);
  q.Bind(5, c.owner).Bind(6, c.enrolled_ms).Bind(7, int64_t{c.revoked ? 1 : 0});
  q.Bind(8, c.revoked_ms);
  return q.Run();
}

Result<std::optional<AgentCredential>> SqlTx::GetAgentCredential(const std::string& node) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT " + std::string(kCredentialColumns) +
                                             " FROM agent_credentials WHERE node_name = ?1"));
  q.Bind(1, node);
  return ReadOne<AgentCredential>(q, ReadAgentCredential);
}

Result<std::vector<AgentCredential>> SqlTx::ListAgentCredentials() {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT " + std::string(kCredentialColumns) +
                                             " FROM agent_credentials ORDER BY node_name"));
  return ReadAll<AgentCredential>(q, ReadAgentCredential);
}

Result<int64_t> SqlTx::PushOutbox(const std::string& node_id, const std::string& type,
                                  const std::string& body) {
  int64_t seq = 0;
  {
    GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("INSERT INTO outbox_seq (node_id, last_seq) "
                                               "VALUES (?1, 1) ON CONFLICT (node_id) DO UPDATE "
                                               "SET last_seq = outbox_seq.last_seq + 1 RETURNING "
                                               "last_seq"));
    q.Bind(1, node_id);
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return Status::Internal("sqlite: outbox_seq: no seq returned");
    seq = q.Int(0);
    // Finish the statement so its effect is complete before the next one.
    GP_ASSIGN_OR_RETURN(bool more, q.Step());
    (void)more;
  }
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("INSERT INTO outbox (node_id, seq, type, body) "
                                             "VALUES (?1, ?2, ?3, ?4)"));
  q.Bind(1, node_id).Bind(2, seq).Bind(3, type).Bind(4, body);
  GP_RETURN_IF_ERROR(q.Run());
  return seq;
}

Result<std::vector<OutboxMessage>> SqlTx::ListOutbox(const std::string& node_id,
                                                     int64_t after_seq) {
  GP_ASSIGN_OR_RETURN(Query q, conn_.Prepare("SELECT seq, type, body FROM outbox WHERE "
                                             "node_id = ?1 AND seq > ?2 ORDER BY seq"));
  q.Bind(1, node_id).Bind(2, after_seq);
  std::vector<OutboxMessage> out;
  while (true) {
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    out.push_back(OutboxMessage{node_id, q.Int(0), q.Text(1), q.Text(2)});
  }
  return out;
}

Status SqlTx::AckOutbox(const std::string& node_id, int64_t upto_seq) {
  GP_ASSIGN_OR_RETURN(Query q,
                      conn_.Prepare("DELETE FROM outbox WHERE node_id = ?1 AND seq <= ?2"));
  q.Bind(1, node_id).Bind(2, upto_seq);
  return q.Run();
}

}  // namespace gpupool
