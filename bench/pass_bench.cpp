// gpupool-pass-bench: the server's scheduling pass as the server runs it
// (server::Pool::Schedule on a real SQLite store), not the scheduler alone
// (gpupool-sched-bench's BM_Decide). Issue 21's figure: a pass at 1,000
// nodes x 10,000 pending that does not grow with the pool's history.
//
//   BM_SchedulePass/nodes:N/pending:P/history:H
//     N nodes of 8 GPUs (agent hellos), every GPU held by a running 1-GPU
//     job (8N live attempts), P pending 1-GPU jobs that wait (there is no
//     room), and H finished jobs in the store (each submitted, placed, run
//     and exited through the Pool, as the server would). One iteration is
//     one Pool::Schedule(): it reads the queue, the live jobs and attempts,
//     the nodes and the groups' usage from the store, builds the snapshot,
//     runs Decide and writes what changed (the waiting reasons, on the
//     first pass only). Counters: pending, live (attempts), history.
//
// Setup (once per argument set, kept across repetitions; not timed) goes
// through the Pool: H + 8N submissions, their placements and reports, then
// P submissions. The store lives in a temporary directory under $TMPDIR,
// removed at the end.
//
// Run: build/bin/gpupool-pass-bench --benchmark_repetitions=3
//        --benchmark_report_aggregates_only=true
// The smoke test (pass_bench_smoke) runs the smallest set briefly.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
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
namespace {

constexpr int kGpusPerNode = 8;

[[noreturn]] void Die(const std::string& what, const Status& s) {
  std::cerr << "gpupool-pass-bench: " << what << ": " << s.ToString() << "\n";
  std::exit(1);
}

// A pool on a fresh store with `nodes` nodes, `history` finished jobs,
// every GPU busy and `pending` jobs waiting.
class PassFixture {
 public:
  PassFixture(int nodes, int pending, int history) {
    dir_ = std::filesystem::temp_directory_path() /
           ("gpupool-pass-bench-" + std::to_string(::getpid()) + "-" + std::to_string(nodes) + "-" +
            std::to_string(pending) + "-" + std::to_string(history));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto store = SqliteStore::Open((dir_ / "state.db").string());
    if (!store.ok()) Die("open the store", store.status());
    store_ = *std::move(store);
    pool_ = std::make_unique<Pool>(*store_, clock_, PoolOptions{}, PoolHooks{});
    for (int n = 0; n < nodes; ++n) Join("node-" + std::to_string(n));
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
  ~PassFixture() {
    pool_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  Pool& pool() { return *pool_; }

 private:
  void Join(const std::string& name) {
    proto::Hello h;
    h.node_name = name;
    h.agent_instance = "i1";
    h.cpu_milli = 64000;
    h.memory_mib = 512 * 1024;
    for (int i = 0; i < kGpusPerNode; ++i)
      h.gpus.push_back({i, name + "-gpu" + std::to_string(i), "A100", 81920, 8, 0, true});
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
        std::cerr << "gpupool-pass-bench: placed " << placed << " of " << count << "\n";
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

  std::filesystem::path dir_;
  FakeClock clock_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<Pool> pool_;
  std::vector<std::string> nodes_;
  std::map<std::string, int64_t> seq_, acked_;
};

void BM_SchedulePass(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const int pending = static_cast<int>(state.range(1));
  const int history = static_cast<int>(state.range(2));
  // One fixture per argument set, kept across repetitions (its setup is
  // the slow part).
  static std::unique_ptr<PassFixture> f;
  static std::vector<int64_t> made_for;
  if (!f || made_for != std::vector<int64_t>{nodes, pending, history}) {
    f.reset();
    f = std::make_unique<PassFixture>(nodes, pending, history);
    made_for = {nodes, pending, history};
  }
  for (auto _ : state) {
    auto placed = f->pool().Schedule();
    if (!placed.ok()) Die("schedule", placed.status());
    if (*placed != 0) {
      state.SkipWithError("the pass placed a job: there should be no room");
      break;
    }
  }
  state.counters["pending"] = pending;
  state.counters["live"] = nodes * kGpusPerNode;
  state.counters["history"] = history;
}
BENCHMARK(BM_SchedulePass)
    ->ArgNames({"nodes", "pending", "history"})
    ->Args({10, 100, 100})  // the smoke test's
    ->Args({1000, 10000, 0})
    ->Args({1000, 10000, 16000})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gpupool::server

BENCHMARK_MAIN();
