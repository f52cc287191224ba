// A synthetic campus: labs that own a few heterogeneous GPU machines and
// submit work with a day/night rhythm, deadline rushes, interactive sessions,
// batch training and opportunistic sweeps, while providers take machines
// away and bring them back. The campus-sharing evaluation
// (docs/evaluation.md, "Campus sharing") runs on it.
//
// Contract: GenerateCampus is a pure function of its options: no I/O, no
// clock, no globals; the same options (seed included) give the same trace,
// bit for bit, on the same platform. Each part of the campus (the machines,
// each lab's batch jobs, sessions, sweeps and deadlines, each machine's
// departures) draws from its own random stream derived from the seed, so
// changing one knob does not reshuffle the others. Safe from any thread.
//
// The model (all knobs below, defaults in brackets):
//  - `labs` labs [8]; each owns `min_nodes`..`max_nodes` machines [1..3],
//    each of one GPU model drawn from the catalog (A100 80 GiB speed 2.0,
//    V100 32 GiB 1.0, RTX3090 24 GiB 0.8, T4 16 GiB 0.4) with 2, 4 or 8 GPUs,
//    8 CPUs and 64 GiB of memory per GPU.
//  - Load differs by lab: lab multipliers are spaced evenly on a log scale
//    from e^-spread to e^+spread [`load_spread` 1.0] and shuffled; they are
//    scaled so that the batch work the labs submit, in GPU-time at speed 1,
//    averages `load` [0.6] of the pool's capacity (GPUs x speed) over the
//    horizon. A lab's batch load on its own machines is thus load x its
//    multiplier: some labs sit mostly idle, others are overloaded.
//    Sessions and sweeps come on top (a few percent of the capacity).
//  - Submissions follow a weekly rhythm (working hours 9-18 busiest,
//    evenings less, nights and weekends little), normalised to a mean of 1.
//  - Deadlines: each lab has `deadlines_per_week` [1] deadlines at random
//    times; in the `burst_days` [2] before one, its batch submission rate is
//    multiplied by `deadline_burst` [3]. Rushes move work, they do not add
//    to it: the rate is divided by its mean rush factor over the horizon.
//  - Batch training (class normal): 1, 2, 4 or 8 GPUs (45/20/20/15%),
//    never more than the lab's largest machine; `gang_fraction` [0.08] of the
//    multi-GPU jobs of labs with two such machines run on 2 nodes. Durations
//    are heavy-tailed: lognormal, median `batch_median_hours` [1.5], sigma
//    `batch_sigma` [1.3], between 5 minutes and 72 hours. 30% ask for the
//    GPU memory of the lab's biggest GPU, 10% pin a model the lab has.
//    `checkpoint_fraction` [0.8] checkpoint every 15 min, 30 min or 1 h; 70%
//    state a runtime limit (what the slowest GPU of the campus would need,
//    x 1.2-2, rounded up to the hour).
//  - Interactive sessions (class interactive): `interactive_per_day` [10]
//    per lab and working day, scaled by the square root of the lab's
//    multiplier, in working hours (a fifth of that at weekends); one GPU
//    (60%) or half of one with 12 GiB; 5 minutes to 8 hours, median 40
//    minutes; never checkpoint (not preemptible).
//  - Opportunistic sweeps: `sweeps_per_week` [1.5] per lab, scaled by its
//    multiplier; each submits 8-40 jobs one second apart, one GPU (70%) or a
//    quarter of one, median 20 minutes, checkpointing every 10 minutes.
//  - Providers: each machine leaves at `leave_per_node_day` [0.25] per day
//    (a Poisson process) and returns after an exponential time with mean
//    `away_hours` [4] (at least 5 minutes).
//  - Time 0 is a Monday 00:00; jobs are submitted during [0, days) [7].
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "sim/trace.h"

namespace gpupool::sim {

struct CampusOptions {
  uint64_t seed = 42;
  int labs = 8;
  double days = 7;
  int min_nodes = 1;
  int max_nodes = 3;
  double load = 0.6;
  double load_spread = 1.0;
  double deadlines_per_week = 1;
  double burst_days = 2;
  double deadline_burst = 3;
  double gang_fraction = 0.08;
  double batch_median_hours = 1.5;
  double batch_sigma = 1.3;
  double checkpoint_fraction = 0.8;
  double interactive_per_day = 10;
  double sweeps_per_week = 1.5;
  double leave_per_node_day = 0.25;
  double away_hours = 4;
};

// Errors: InvalidArgument naming the knob out of range.
Result<Trace> GenerateCampus(const CampusOptions& options);

// The options as a compact JSON object (recorded in the trace's meta line).
std::string CampusOptionsJson(const CampusOptions& options);

}  // namespace gpupool::sim
