// The Pool test fixture: a Pool on a real SQLite store in a temporary
// directory, with a fake clock and hooks that record what they were told.
// Shared by the Pool's test files. Every pool it makes runs in the queue's
// check mode (server/pool_queue.h): after every transaction, the queue in
// memory is compared with the store, and any difference fails the test.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "server/pool.h"
#include "store/sqlite_store.h"

namespace gpupool::server {

class PoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pool_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    store_ = *SqliteStore::Open((dir_ / "state.db").string());
    PoolHooks hooks;
    hooks.outbox_ready = [this](const std::string& n) { outbox_nodes_.push_back(n); };
    hooks.job_changed = [this](int64_t j) { changed_jobs_.push_back(j); };
    hooks.schedule_needed = [this] { ++schedule_requests_; };
    hooks.manifest_stored = [this](const std::string& id) { return manifests_.count(id) > 0; };
    hooks_ = hooks;
    options_ = Checked(PoolOptions{});
    pool_ = std::make_unique<Pool>(*store_, clock_, options_, hooks);
  }
  // `options` with the queue's check mode on (failing the test on a drift).
  static PoolOptions Checked(PoolOptions options) {
    options.queue_check.check = true;
    if (!options.queue_check.on_drift) {
      options.queue_check.on_drift = [](const std::string& d) { ADD_FAILURE() << d; };
    }
    return options;
  }
  // Replaces the pool with one using `options` (the same store).
  void UseOptions(PoolOptions options) {
    options_ = Checked(std::move(options));
    pool_ = std::make_unique<Pool>(*store_, clock_, options_, hooks_);
  }
  // A new store and pool over the same files, as after a server restart.
  void Restart() {
    pool_.reset();
    store_.reset();
    store_ = *SqliteStore::Open((dir_ / "state.db").string());
    pool_ = std::make_unique<Pool>(*store_, clock_, options_, hooks_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  proto::Hello MakeHello(const std::string& name, int gpus, const std::string& instance = "i1") {
    proto::Hello h;
    h.node_name = name;
    h.agent_instance = instance;
    h.cpu_milli = 8000;
    h.memory_mib = 32768;
    for (int i = 0; i < gpus; ++i) {
      h.gpus.push_back({i, name + "-gpu" + std::to_string(i), "A100", 81920, 8, 0, true});
    }
    return h;
  }

  JobSpec Spec(int gpus, const std::string& run = "true") {
    JobSpec s;
    s.name = "j";
    s.run = run;
    s.resources.gpus = gpus;
    return s;
  }

  std::vector<proto::StopTask> Stops(const std::string& node, int64_t after = 0) {
    std::vector<proto::StopTask> out;
    for (const auto& m : *pool_->PendingOrders(node, after)) {
      if (m.type == proto::kStop) out.push_back(*proto::DecodeStopTask(m.body));
    }
    return out;
  }

  std::optional<GroupUsage> StoredUsage(const std::string& group) {
    std::optional<GroupUsage> out;
    EXPECT_TRUE(store_
                    ->Transact([&](Tx& tx) -> Status {
                      GP_ASSIGN_OR_RETURN(out, tx.GetGroupUsage(group));
                      return Status::Ok();
                    })
                    .ok());
    return out;
  }

  std::vector<proto::StartTask> Starts(const std::string& node, int64_t after = 0) {
    std::vector<proto::StartTask> out;
    for (const auto& m : *pool_->PendingOrders(node, after)) {
      if (m.type == proto::kStart) out.push_back(*proto::DecodeStartTask(m.body));
    }
    return out;
  }

  Status Report(const std::string& node, int64_t seq, const proto::TaskReport& r) {
    return pool_->AgentMessage(node, seq, std::string(proto::kTaskStatus), proto::Encode(r));
  }

  // A lending of every GPU of `h`, in full.
  static NodeLending LendsAll(const proto::Hello& h) {
    NodeLending l;
    for (const GpuInfo& g : h.gpus) l.gpus[g.uuid] = g.memory_mib;
    return l;
  }

  Status SendLending(const std::string& node, int64_t seq, const NodeLending& l) {
    return pool_->AgentMessage(node, seq, std::string(proto::kLending), proto::Encode(l));
  }

  NodeStatus NodeNamed(const std::string& name) {
    for (NodeStatus& n : *pool_->ListNodes()) {
      if (n.node.name == name) return n;
    }
    ADD_FAILURE() << "no node " << name;
    return {};
  }

  std::filesystem::path dir_;
  FakeClock clock_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<Pool> pool_;
  PoolHooks hooks_;
  PoolOptions options_;
  std::vector<std::string> outbox_nodes_;
  std::vector<int64_t> changed_jobs_;
  int schedule_requests_ = 0;
  std::set<std::string> manifests_;  // what the fake blob store holds
};

}  // namespace gpupool::server
