// The fake CUDA driver's state shared between processes (see fake_cuda.cpp):
// per device, keyed by UUID, two small text files in the state directory
// ($FAKE_CUDA_STATE_DIR, else /tmp/fake-cuda-<uid>; created when missing):
//   <uuid>.mem   "<pid> <start time> <bytes>" per process holding memory
//   <uuid>.time  "busy_until_ns <N>", then "<pid> <start time> <busy µs>" lines
// Every operation opens the file afresh and holds flock(LOCK_EX) on it for its
// whole read-modify-write, so it is safe across processes, threads and fork.
#ifndef GPUPOOL_TESTS_FAKE_CUDA_SHARED_STATE_H_
#define GPUPOOL_TESTS_FAKE_CUDA_SHARED_STATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpushare/cuda_abi.h"

#pragma GCC visibility push(hidden)

namespace fake_cuda {

// One process's line. A process is named by its pid and its start time
// (field 22 of /proc/<pid>/stat), so a reused pid is another process.
struct Record {
  long pid = 0;
  unsigned long long start = 0;
  unsigned long long value = 0;  // bytes or busy µs
};

// Runs `body` on the .mem records of a device and writes them back. Records
// of processes that are gone (no /proc/<pid>, a zombie, another start time)
// are dropped before `body` sees them, and empty ones after. Answers
// `body`'s result, or CUDA_ERROR_UNKNOWN when the file cannot be opened.
CUresult WithMemory(const std::string& uuid,
                    const std::function<CUresult(std::vector<Record>&)>& body);

// Runs `body` on a device's timeline (busy_until in CLOCK_MONOTONIC ns, and
// every process's busy total, kept after it exits) and writes it back.
CUresult WithTimeline(const std::string& uuid,
                      const std::function<CUresult(int64_t&, std::vector<Record>&)>& body);

// The calling process's record in `records`, added when missing.
Record& OwnRecord(std::vector<Record>& records);

// The sum of the values of `pid`'s records; pid 0: of all.
unsigned long long SumRecords(const std::vector<Record>& records, long pid);

// Removes every .mem and .time file of the state directory.
void RemoveStateFiles();

// CLOCK_MONOTONIC, which all processes share.
int64_t NowNs();
void SleepUntil(int64_t deadline_ns);

}  // namespace fake_cuda

#pragma GCC visibility pop

#endif  // GPUPOOL_TESTS_FAKE_CUDA_SHARED_STATE_H_
