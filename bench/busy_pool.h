// BusyPool: a server Pool on a fresh SQLite store, filled as the server
// would fill it (agent hellos, submissions, placements, the agents'
// reports), for the benchmarks of the server's own work (pass_bench.cpp,
// metrics_bench.cpp). Not timed: the benchmarks time what they do with it.
//
//   BusyPool(N, P, H): N nodes of 8 GPUs (agent hellos), H finished jobs
//   (each submitted, placed, run and exited through the Pool), every GPU
//   held by a running 1-GPU job (8N live attempts), then P pending 1-GPU
//   jobs that wait (there is no room). The store lives in a temporary
//   directory under $TMPDIR, removed by the destructor, or in `keep_dir`
//   (DIR/state.db, a server's data dir) when one is given, and stays.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "proto/messages.h"
#include "server/pool.h"
#include "store/sqlite_store.h"

namespace gpupool::server {

constexpr int kGpusPerNode = 8;

[[noreturn]] inline void Die(const std::string& what, const Status& s) {
  std::cerr << "gpupool bench: " << what << ": " << s.ToString() << "\n";
  std::exit(1);
}

// A pool on a fresh store with `nodes` nodes, `history` finished jobs,
// every GPU busy and `pending` jobs waiting.
class BusyPool {
 public:
  // `nvml_names`: nodes and GPUs named as on a campus ("lab-node-0042",
  // NVML's "GPU-8a3b0c1d-..." uuids, "NVIDIA A100-SXM4-80GB", not simulated)
  // rather than "node-42", "node-42-gpu0", "A100".
  BusyPool(int nodes, int pending, int history, PoolHooks hooks = {}, bool nvml_names = false,
           std::filesystem::path keep_dir = {}, int64_t start_ms = 1'700'000'000'000)
      : nvml_names_(nvml_names), keep_(!keep_dir.empty()), clock_(start_ms) {
    dir_ = keep_ ? keep_dir
                 : std::filesystem::temp_directory_path() /
                       ("gpupool-bench-" + std::to_string(::getpid()) + "-" +
                        std::to_string(nodes) + "-" + std::to_string(pending) + "-" +
                        std::to_string(history));
    if (!keep_) std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto store = SqliteStore::Open((dir_ / "state.db").string());
    if (!store.ok()) Die("open the store", store.status());
    store_ = *std::move(store);
    pool_ = std::make_unique<Pool>(*store_, clock_, PoolOptions{}, std::move(hooks));
    for (int n = 0; n < nodes; ++n) Join(NodeName(n));
    const int gpus = nodes * kGpusPerNode;
    // History: rounds of jobs that fill every GPU, run and exit.
    for (int done = 0; done < history;) {
      const int round = std::min(gpus, history - done);
      Fill(round, /*finish=*/true);
      done += round;
    }
    Fill(gpus, /*finish=*/false);  // every GPU busy from now on
    for (int i = 0; i < pending; ++i) Submit();
  }
  ~BusyPool() {
    pool_.reset();
    store_.reset();
    if (!keep_) std::filesystem::remove_all(dir_);
  }
  Pool& pool() { return *pool_; }
  std::string NodeName(int n) const {
    if (!nvml_names_) return "node-" + std::to_string(n);
    char name[32];
    std::snprintf(name, sizeof name, "lab-node-%04d", n);
    return name;
  }
  std::string GpuUuid(const std::string& node, int i) const {
    if (!nvml_names_) return node + "-gpu" + std::to_string(i);
    // NVML's form, from a hash of the node's name and the index.
    const uint64_t h = std::hash<std::string>{}(node)*31 + static_cast<uint64_t>(i);
    char uuid[48];
    std::snprintf(uuid, sizeof uuid, "GPU-%08x-%04x-%04x-%04x-%012llx",
                  static_cast<unsigned>(h >> 32), static_cast<unsigned>(h >> 16) & 0xffff,
                  static_cast<unsigned>(h) & 0xffff, static_cast<unsigned>(i),
                  static_cast<unsigned long long>(h & 0xffffffffffffULL));
    return uuid;
  }
  Store& store() { return *store_; }
  const Clock& clock() const { return clock_; }
  const std::vector<std::string>& nodes() const { return nodes_; }

 private:
  void Join(const std::string& name) {
    proto::Hello h;
    h.node_name = name;
    h.agent_instance = "i1";
    h.cpu_milli = 64000;
    h.memory_mib = 512 * 1024;
    for (int i = 0; i < kGpusPerNode; ++i) {
      h.gpus.push_back({i, GpuUuid(name, i), nvml_names_ ? "NVIDIA A100-SXM4-80GB" : "A100", 81920,
                        8, 0, !nvml_names_});
    }
    auto w = pool_->AgentHello(h);
    if (!w.ok()) Die("hello", w.status());
    nodes_.push_back(w->node_id);
  }
  void Submit() {
    JobSpec s;
    s.name = "pass-bench";
    s.run = "true";
    s.resources.gpus = 1;
    auto job = pool_->Submit(s, "alice");
    if (!job.ok()) Die("submit", job.status());
  }
  // Submits `count` 1-GPU jobs, places them, reports each running (and
  // exited when `finish`).
  void Fill(int count, bool finish) {
    for (int i = 0; i < count; ++i) Submit();
    // A pass places a bounded number of jobs; the server runs the next at
    // once while some were placed.
    int placed = 0;
    while (placed < count) {
      auto p = pool_->Schedule();
      if (!p.ok()) Die("schedule", p.status());
      if (*p == 0) {
        std::cerr << "gpupool bench: placed " << placed << " of " << count << "\n";
        std::exit(1);
      }
      placed += *p;
    }
    for (const std::string& node : nodes_) {
      auto orders = pool_->PendingOrders(node, acked_[node]);
      if (!orders.ok()) Die("orders", orders.status());
      for (const OutboxMessage& m : *orders) {
        acked_[node] = std::max(acked_[node], m.seq);
        if (m.type != proto::kStart) continue;
        auto start = proto::DecodeStartTask(m.body);
        if (!start.ok()) Die("decode a start", start.status());
        Report(node, {start->attempt_id, proto::TaskState::kRunning, 0, 0, "", clock_.NowMs()});
        if (finish)
          Report(node, {start->attempt_id, proto::TaskState::kExited, 0, 0, "", clock_.NowMs()});
      }
      if (Status s = pool_->AgentAcked(node, acked_[node]); !s.ok()) Die("ack", s);
    }
    clock_.AdvanceMs(1000);
  }
  void Report(const std::string& node, const proto::TaskReport& r) {
    Status s =
        pool_->AgentMessage(node, ++seq_[node], std::string(proto::kTaskStatus), proto::Encode(r));
    if (!s.ok()) Die("report", s);
  }

  bool nvml_names_ = false;
  bool keep_ = false;
  std::filesystem::path dir_;
  FakeClock clock_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<Pool> pool_;
  std::vector<std::string> nodes_;
  std::map<std::string, int64_t> seq_, acked_;
};

}  // namespace gpupool::server
