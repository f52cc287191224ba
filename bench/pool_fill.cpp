// gpupool-pool-fill: writes a server's state database as a busy campus
// pool's would be after a while (bench/busy_pool.h: nodes that joined, a
// history of jobs that ran and exited, every GPU busy, jobs waiting), all
// through the server's own Pool on its own SQLite store, so that a real
// `gpupool server --data-dir DIR` can then be started on it. For the
// dashboard benchmark (bench/dashboard_bench.py): 100,000 jobs in the store
// take seconds this way instead of minutes of submissions.
//
//   gpupool-pool-fill --dir DIR [--nodes 10] [--history 100000] [--pending 1000]
#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>

#include "busy_pool.h"

int main(int argc, char** argv) {
  CLI::App app{"gpupool-pool-fill: a server data dir with a pool's history"};
  std::string dir;
  int nodes = 10, history = 100000, pending = 1000;
  app.add_option("--dir", dir, "the server's data dir (DIR/state.db must not exist)")->required();
  app.add_option("--nodes", nodes, "nodes of 8 GPUs that ran the history")->capture_default_str();
  app.add_option("--history", history, "jobs that ran and exited")->capture_default_str();
  app.add_option("--pending", pending, "jobs left waiting")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (std::filesystem::exists(std::filesystem::path(dir) / "state.db")) {
    std::cerr << "gpupool-pool-fill: " << dir << "/state.db exists already\n";
    return 2;
  }
  // The history ends now, one second per round of jobs before it.
  const int rounds = (history + nodes * gpupool::server::kGpusPerNode - 1) /
                     (nodes * gpupool::server::kGpusPerNode);
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const auto t0 = std::chrono::steady_clock::now();
  gpupool::server::BusyPool pool(nodes, pending, history, {}, /*nvml_names=*/true, dir,
                                 now - 1000LL * (rounds + 1));
  std::cout << "filled " << dir << "/state.db: " << nodes << " nodes, " << history
            << " finished jobs, " << nodes * gpupool::server::kGpusPerNode << " running, "
            << pending << " pending, in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
            << " s\n";
  return 0;
}
