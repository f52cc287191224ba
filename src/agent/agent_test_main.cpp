// main() of the agent's tests: like gtest's, except that the binary also
// serves as its own shim program (agent/shim_launch.h execs /proc/self/exe
// with `__shim`), so tasks started by the tests run through the same exec
// path as the agent's.
#include <gtest/gtest.h>

#include <cstring>

#include "agent/shim_launch.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], gpupool::agent::kShimCommand) == 0) {
    return gpupool::agent::ShimLauncher::Main(argc, argv);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
