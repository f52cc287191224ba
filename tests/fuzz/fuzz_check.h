// FUZZ_CHECK: an invariant of a fuzz target. A violation prints what broke
// and the values involved, then aborts, so that libFuzzer keeps the input
// as a crash (and the replay test fails on it).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace gpupool::fuzz {

[[noreturn]] inline void InvariantBroken(const char* file, int line, const char* condition,
                                         const std::string& detail) {
  std::fprintf(stderr, "%s:%d: invariant broken: %s\n%s\n", file, line, condition, detail.c_str());
  std::abort();
}

}  // namespace gpupool::fuzz

#define FUZZ_CHECK(condition, detail)                                                           \
  do {                                                                                          \
    if (!(condition)) ::gpupool::fuzz::InvariantBroken(__FILE__, __LINE__, #condition, detail); \
  } while (0)
