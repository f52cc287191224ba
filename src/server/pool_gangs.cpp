// Pool: carrying out the gang protocol's steps (server/gang_protocol.h)
// inside the caller's transaction.
#include "server/pool.h"

#include "server/gang_protocol.h"

namespace gpupool::server {

Status Pool::CarryOut(Tx& tx, Job& job, Attempt& attempt, gang::Outcome out) {
  for (const auto& [node_id, order] : out.stops) {
    GP_RETURN_IF_ERROR(PushStop(tx, node_id, attempt.id, order));
  }
  for (int32_t rank : out.start_ranks) {
    for (const AttemptRank& r : attempt.ranks) {
      if (r.rank == rank) GP_RETURN_IF_ERROR(PushStart(tx, job, attempt, &r));
    }
  }
  for (std::string& line : out.log_lines) fx_.log_lines.push_back(std::move(line));
  if (out.refused_node) fx_.refusals.emplace_back(job.id, *out.refused_node);
  if (out.job_event) {
    // ApplyEvent stores the attempt.
    return ApplyEvent(tx, job, attempt, *out.job_event, out.report ? &*out.report : nullptr);
  }
  if (out.store_attempt) return tx.PutAttempt(attempt);
  return Status::Ok();
}

Status Pool::StopGang(Tx& tx, Job& job, Attempt& attempt, int32_t cause_rank,
                      const std::string& why) {
  return CarryOut(tx, job, attempt, gang::Stop(job, attempt, cause_rank, why, clock_.NowMs()));
}

Status Pool::ApplyRankReport(Tx& tx, Job& job, Attempt& attempt, const std::string& node_id,
                             const proto::TaskReport& r) {
  GP_ASSIGN_OR_RETURN(auto node, tx.GetNode(node_id));
  return CarryOut(
      tx, job, attempt,
      gang::OnRankReport(job, attempt, node_id, node ? node->name : node_id, r, clock_.NowMs()));
}

}  // namespace gpupool::server
