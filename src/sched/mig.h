// MIG in the scheduler: which GPUs a request may use.
//
// A MIG instance (GpuView::mig_slices > 0) is a GPU of its own, taken whole
// by one job and never shared further. Only a request for a MIG instance
// (Request::mig_slices > 0, with gpus == 1) may use one, and only one that
// has at least the compute slices and the memory of the profile asked for;
// among those that fit on a node the smallest is taken. A MIG request never
// takes a whole GPU, and whole-GPU and share requests never take a MIG
// instance: as in Slurm and Kubernetes, MIG instances are resources of their
// own kind, so a `gpus: 1` job is never handed a slice of a GPU it did not
// ask for.
//
// Contract: pure functions on values; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

#include "model/resources.h"
#include "sched/scheduler.h"

namespace gpupool::sched {

// May a GPU whose MIG profile is (slices, memory_gb) (0, 0 for a whole GPU)
// serve `r`?
inline bool MigOk(int32_t slices, int32_t memory_gb, const Request& r) {
  if (r.mig_slices <= 0) return slices == 0;
  return slices > 0 && MigFits({slices, memory_gb}, {r.mig_slices, r.mig_memory_gb});
}

// Orders fitting MIG instances, smallest first.
inline bool MigSmaller(int32_t a_slices, int32_t a_gb, int64_t a_mib, int32_t b_slices,
                       int32_t b_gb, int64_t b_mib) {
  return std::tie(a_slices, a_gb, a_mib) < std::tie(b_slices, b_gb, b_mib);
}

// "3g.40gb" for a MIG request.
inline std::string MigRequestText(const Request& r) {
  return FormatMigProfile({r.mig_slices, r.mig_memory_gb});
}

}  // namespace gpupool::sched
