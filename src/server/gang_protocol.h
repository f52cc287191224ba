// The gang protocol (an attempt with ranks on several nodes) as pure steps.
//
// Each step takes the job, its attempt (changed in place: rank states, the
// rendezvous, the stop order) and what happened, and returns an Outcome:
// the orders for agents, log lines, a refusal, and what the job does next.
// Nothing here reads or writes the store or the clock; the Pool carries an
// Outcome out inside its transaction (server/pool_gangs.cpp), so the
// protocol is tested on values (gang_protocol_test.cpp).
//
// The rules:
//  - A torch gang's ranks after 0 start once rank 0 reports its rendezvous
//    (master address and port); the job runs once every rank runs.
//  - A rank that ends badly stops the gang when it was displaced (lost,
//    vacated, refused: the gang is requeued) or the gang is torch (it
//    cannot go on without a rank); replicas go on without a failed rank.
//  - Stopping a gang gives every other live rank the checkpoint signal
//    first (rank 0 writes the checkpoint the requeued gang resumes from);
//    ranks still held back before the rendezvous end at once.
//  - Once every rank has ended the attempt closes: all succeeded, the job
//    succeeded; a rank displaced, or a preemption, requeues it; otherwise
//    the job failed with the rank whose end stopped the gang, else the
//    first to fail.
//  - A report from a rank that already ended, saying it still runs, gets a
//    stop ("stale attempt").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/job.h"
#include "model/job_state.h"
#include "proto/messages.h"
#include "server/pool_rules.h"

namespace gpupool::server::gang {

struct Outcome {
  // Orders for agents: stops (node id, order), then the start orders of
  // these ranks (by rank number).
  std::vector<std::pair<std::string, StopOrder>> stops;
  std::vector<int32_t> start_ranks;
  std::vector<std::string> log_lines;
  // The job refused the node (its start there was refused while it waited).
  std::optional<std::string> refused_node;
  // What the job does next (with `report`, when one goes with it); none:
  // the attempt is stored as it now is, when `store_attempt`.
  std::optional<JobEvent> job_event;
  std::optional<proto::TaskReport> report;
  bool store_attempt = false;
};

// Stops every live rank of the gang but `cause_rank`, because `why`. Not
// when the attempt is already leaving (nothing to do).
Outcome Stop(const Job& job, Attempt& attempt, int32_t cause_rank, const std::string& why,
             int64_t now);

// A report from the agent of the rank on `node_id` (named `node_name` in
// messages), already fenced: its attempt is the job's current one and runs
// there.
Outcome OnRankReport(const Job& job, Attempt& attempt, const std::string& node_id,
                     std::string_view node_name, const proto::TaskReport& r, int64_t now);

}  // namespace gpupool::server::gang
