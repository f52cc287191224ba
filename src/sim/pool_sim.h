// The campus simulator's second engine: the trace replayed through the
// server's own core (server::Pool over a MemoryStore) in simulated time,
// with simulated agents, giving the same SimResult as the DES (des.h) so
// that metrics, SVGs and `gpupool sim campus` work unchanged.
//
// Contract: SimulateThroughPool is a function of the trace and the options:
// no I/O beyond the Pool's log lines, no wall clock (the Pool runs on a
// FakeClock the event loop moves), and no randomness that changes a result
// (the Pool names nodes with random ids; the scheduler orders them by name).
// Safe from any thread on caller-owned values; runs share nothing.
//
// What is the server's and what is the simulator's:
//  - The server decides everything a real pool decides: placements,
//    preemptions, requeues (lost, preempted), gangs (a torch gang's
//    rendezvous, gang stops), providers' lending (LendingAdmits), fair-share
//    charges. Each trace job is a Pool submission (its group, class, GPUs or
//    share, gang size, CPU and memory, runtime bound as max_runtime, and a
//    checkpoint section when it checkpoints); each trace node is an agent
//    that says hello with simulated GPUs (GpuInfo::simulated, "GPU-SIM-"
//    UUIDs) and lends every GPU, to the groups its trace node's policy
//    admits (allow_groups, deny_groups), unless PoolSimOptions says
//    otherwise.
//  - The simulated agents read their node's outbox after each instant:
//    a start order is reported running at once (rank 0 of a torch gang
//    with a rendezvous port, which releases the other ranks' starts); a
//    stop order is reported ended (exit 0, SIGTERM, "stopped") after
//    `preempt_grace_ms`. A job's attempt is reported exited (0) on every
//    rank when its remaining work is done at the speed of its slowest node.
//    Each time its progress passes a multiple of its checkpoint interval,
//    the agent posts a checkpoint (Pool::AddCheckpoint; the blob store is
//    simulated), and every start order must restore the newest one the
//    simulation took (an Internal error otherwise).
//    A provider leaving is the agent's `leave` and disconnect, then the
//    Pool's own node check (leases are off, so its attempts are lost at
//    once); a return is a new agent's hello.
//  - The simulator keeps the work: progress, checkpoints at multiples of
//    the interval, work lost when an attempt stops (a preemption's stop
//    order, or its node leaving), migrations. An attempt's fate (completed,
//    preempted, node left) and when its GPUs were freed are the Pool's: read
//    from the attempt once the Pool has closed it.
//  - Scheduling passes (Pool::Schedule) happen where the DES calls Decide:
//    once after each instant's events for each pool they touched, and on
//    ticks while a job that could run waits.
//  - The result lists attempts in start order; those started at the same
//    instant are in the order the agents saw their start orders, which may
//    not be the DES's (the scheduler's placement order).
//  - Modes: pooled is one Pool over every node; per-lab is one Pool per lab
//    over the nodes it owns (nodes owned by no lab join none).
//  - Every start order is checked against the simulated node (present, the
//    GPUs exist and have room); a violation is an Internal error, and so is
//    a Pool ending an attempt in a way the simulator does not model.
//
// Where this differs from the DES on purpose (the server's behaviour): the
// server's pass counts a victim's lost work from its start, not from its
// newest checkpoint (server/pass_input.cpp); a gang whose node left holds
// its other ranks' GPUs until they have stopped (the grace); a vacating
// attempt's expected end is not known to the server's backfill.
#pragma once

#include <map>
#include <string>

#include "common/status.h"
#include "model/node.h"
#include "sim/des.h"
#include "sim/trace.h"

namespace gpupool::sim {

// What only the pool engine can express.
struct PoolSimOptions {
  // Node name -> what its provider lends (its whole policy, replacing the
  // trace's allow/deny lists); nodes not named lend every GPU as their
  // trace node says. The DES cannot express either.
  std::map<std::string, NodeLending> lending;
};

Result<SimResult> SimulateThroughPool(const Trace& trace, const SimOptions& options,
                                      const PoolSimOptions& extra = {});

}  // namespace gpupool::sim
