// `gpupool agent selftest` (agent/selftest.h): the checks as a table of
// pass / warn / fail with what to do, or -o json; exit status 1 when a
// check failed.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "agent/selftest.h"

namespace gpupool::cli {

struct SelftestFlags {
  agent::SelftestOptions options;
  std::string join_token_file;
  std::string output = "table";
};

// Adds the subcommand under `agent`; RunSelftestCommand once it is parsed.
CLI::App* AddSelftestCommand(CLI::App& agent, SelftestFlags& f);
int RunSelftestCommand(SelftestFlags& f);

}  // namespace gpupool::cli
