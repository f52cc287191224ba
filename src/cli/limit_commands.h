// The commands around the server's limits and its database:
//
//   gpupool quota                                  where you (and your labs) stand
//   gpupool admin quota list                       every user and group (admins)
//   gpupool admin quota set --user U|--group G SIZE|none
//   gpupool checkpoint delete JOB --id N|--all      free a finished job's checkpoints
//   gpupool admin backup FILE                      a consistent copy of the running
//                                                  server's database, through the API
//   gpupool admin backup --data-dir DIR FILE       the same from the database file
//   gpupool admin restore --data-dir DIR FILE      put a backup in place (server stopped)
//
// See docs/operator-guide.md#limits and #backup-and-restore.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>

#include "cli/commands.h"

namespace gpupool::cli {

struct LimitFlags {
  std::function<int()> run;  // set by whichever of these commands was parsed
  std::string user, group, size, file, data_dir, job, to;
  int64_t number = 0;
  bool all = false;
};

void AddLimitCommands(CLI::App& app, CLI::App& admin, CLI::App& checkpoint, GlobalFlags& g,
                      LimitFlags& f);

}  // namespace gpupool::cli
