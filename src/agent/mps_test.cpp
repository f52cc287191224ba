// MpsDaemons against tests/fake_mps/nvidia-cuda-mps-control, which records
// every command line and stdin command it gets.
#include "agent/mps.h"

#include <signal.h>
#include <stdlib.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/files.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr const char* kGpuA = "GPU-aaaa-1111";
constexpr const char* kGpuB = "GPU-bbbb-2222";

class MpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-mps-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    record_ = dir_ + "/record";
    ::setenv("FAKE_MPS_RECORD", record_.c_str(), 1);
  }
  void TearDown() override {
    // Quits what a failed test left; the fakes also leave once their
    // pipe directories are gone.
    if (mps_) mps_->Release({});
    ::unsetenv("FAKE_MPS_RECORD");
    fs::remove_all(dir_);
  }
  MpsDaemons& Mps() {
    if (!mps_) {
      mps_ = std::make_unique<MpsDaemons>(
          MpsDaemons::Options{GPUPOOL_FAKE_MPS_CONTROL, dir_ + "/mps", 10'000});
    }
    return *mps_;
  }
  // The fake's record: one JSON object per invocation or command.
  std::vector<nlohmann::json> Record() const {
    std::vector<nlohmann::json> out;
    std::istringstream lines(ReadFile(record_).value_or(""));
    for (std::string line; std::getline(lines, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }
  std::vector<std::string> Commands() const {
    std::vector<std::string> out;
    for (const auto& r : Record()) out.push_back(r["command"].get<std::string>());
    return out;
  }

  std::string dir_, record_;
  std::unique_ptr<MpsDaemons> mps_;
};

TEST(FindMpsControl, OnThePathOrNamedOrAClearError) {
  EXPECT_EQ(*FindMpsControl(GPUPOOL_FAKE_MPS_CONTROL, ""), GPUPOOL_FAKE_MPS_CONTROL);
  const std::string dir = fs::path(GPUPOOL_FAKE_MPS_CONTROL).parent_path().string();
  EXPECT_EQ(*FindMpsControl("", "/nonexistent:" + dir), GPUPOOL_FAKE_MPS_CONTROL);
  auto missing = FindMpsControl("", "/nonexistent");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("sharing: mps needs NVIDIA's nvidia-cuda-mps-control, which is not on "
                        "the PATH (/nonexistent)"));
  EXPECT_THAT(FindMpsControl("/nonexistent/mps-control", "").status().message(),
              HasSubstr("not an executable file"));
}

TEST_F(MpsTest, OneDaemonPerGpuStartedOnceAndQuitWhenTheLastShareLeaves) {
  auto pipe = Mps().Acquire(kGpuA, "alice", {});
  ASSERT_TRUE(pipe.ok()) << pipe.status().ToString();
  EXPECT_EQ(*pipe, Mps().PipeDir(kGpuA));
  EXPECT_EQ(fs::path(*pipe).parent_path().parent_path(), dir_ + "/mps");
  EXPECT_EQ(*ReadFileTrimmed(fs::path(*pipe).parent_path().string() + "/gpu"), kGpuA);
  EXPECT_TRUE(fs::exists(*pipe + "/nvidia-cuda-mps-control.pid"));
  // Writable to every account (the server runs as its client's), sticky.
  EXPECT_EQ(fs::status(*pipe).permissions() & fs::perms::mask,
            fs::perms::all | fs::perms::sticky_bit);
  std::vector<MpsClient> live = {{"1.1", kGpuA, "alice"}};
  ASSERT_TRUE(Mps().Acquire(kGpuA, "alice", live).ok());  // the same daemon
  auto started = Record();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0]["argv"], nlohmann::json::array({"-d"}));
  EXPECT_EQ(started[0]["pipe_dir"], *pipe);
  EXPECT_EQ(started[0]["log_dir"], Mps().LogDir(kGpuA));
  EXPECT_EQ(started[0]["visible_devices"], kGpuA);
  EXPECT_THAT(Mps().Running(), ElementsAre(kGpuA));
  if (::geteuid() == 0) {
    // The daemon's /dev/shm is the GPU's own directory, not the machine's.
    ASSERT_EQ(Mps().ShmDir(kGpuA), fs::path(*pipe).parent_path().string() + "/shm");
    EXPECT_TRUE(fs::exists(Mps().ShmDir(kGpuA) + "/fake-mps-daemon"));
    EXPECT_FALSE(fs::exists("/dev/shm/fake-mps-daemon"));
  } else {
    EXPECT_EQ(Mps().ShmDir(kGpuA), "");
  }

  // Another user's share of the same GPU is refused; another GPU is its own.
  auto bob = Mps().Acquire(kGpuA, "bob", live);
  ASSERT_FALSE(bob.ok());
  EXPECT_THAT(bob.status().message(),
              HasSubstr("MPS, which serves one user at a time: alice holds it now"));
  ASSERT_TRUE(Mps().Acquire(kGpuB, "bob", live).ok());
  EXPECT_THAT(Mps().Running(), ElementsAre(kGpuA, kGpuB));

  // Bob's share left: his GPU's daemon is told to quit, alice's stays.
  live.push_back({"2.1", kGpuA, "alice"});
  Mps().Release(live);
  EXPECT_THAT(Mps().Running(), ElementsAre(kGpuA));
  EXPECT_THAT(Commands(), ElementsAre("-d", "-d", "quit"));
  EXPECT_EQ(Record().back()["pipe_dir"], Mps().PipeDir(kGpuB));
  // Release returns once the daemon has left (its own cleanup included),
  // so nothing races a daemon started afresh in the same directory.
  EXPECT_FALSE(fs::exists(Mps().PipeDir(kGpuB) + "/nvidia-cuda-mps-control.pid"));
  EXPECT_FALSE(fs::exists(Mps().PipeDir(kGpuB) + "/control"));
  Mps().Release({});
  EXPECT_TRUE(Mps().Running().empty());
  EXPECT_THAT(Commands(), ElementsAre("-d", "-d", "quit", "quit"));
  EXPECT_EQ(Record().back()["pipe_dir"], Mps().PipeDir(kGpuA));
}

TEST_F(MpsTest, AServerThatDiesUnderItsSharesIsReportedOnceAndRestartedAfter) {
  ASSERT_TRUE(Mps().Acquire(kGpuA, "alice", {}).ok());
  std::vector<MpsClient> live = {{"1.1", kGpuA, "alice"}, {"2.1", kGpuA, "alice"}};
  EXPECT_TRUE(Mps().Check(live, 0).empty());  // sees the server
  EXPECT_TRUE(Mps().Check(live, 1).empty());  // too soon: not asked
  EXPECT_THAT(Commands(), ElementsAre("-d", "get_server_list"));
  EXPECT_TRUE(Mps().Check(live, 2000).empty());  // still there
  // A client's fatal fault takes the server down.
  auto server = ReadFileTrimmed(Mps().PipeDir(kGpuA) + "/fake-server.pid");
  ASSERT_TRUE(server.ok());
  ASSERT_EQ(::kill(std::stoi(*server), SIGKILL), 0);
  std::vector<MpsFailure> failed;
  for (int64_t now = 4000; failed.empty() && now < 4000 + 2000 * 50; now += 2000) {
    failed = Mps().Check(live, now);  // the fake reaps it within its next turn
  }
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].gpu_uuid, kGpuA);
  EXPECT_THAT(failed[0].reason, HasSubstr("the MPS server (pid " + *server + ") exited"));
  EXPECT_THAT(failed[0].attempts, ElementsAre("1.1", "2.1"));
  EXPECT_TRUE(Mps().Check(live, 1'000'000).empty());  // once
  // A failed daemon takes no new share while shares are left on it...
  auto more = Mps().Acquire(kGpuA, "alice", live);
  ASSERT_FALSE(more.ok());
  EXPECT_THAT(more.status().message(), HasSubstr("restarts once its shares have ended"));
  // ...and is quit when they have left, then started afresh, with nothing
  // left in its pipe directory of what the jobs put there.
  ASSERT_TRUE(WriteFileAtomic(Mps().PipeDir(kGpuA) + "/left-by-a-job", "x").ok());
  Mps().Release({});
  ASSERT_TRUE(Mps().Acquire(kGpuA, "alice", {}).ok());
  EXPECT_FALSE(fs::exists(Mps().PipeDir(kGpuA) + "/left-by-a-job"));
  std::vector<std::string> commands = Commands();
  EXPECT_EQ(std::count(commands.begin(), commands.end(), "-d"), 2);
  EXPECT_EQ(std::count(commands.begin(), commands.end(), "quit"), 1);
}

TEST_F(MpsTest, AControlDaemonThatIsGoneIsAFailure) {
  ASSERT_TRUE(Mps().Acquire(kGpuA, "alice", {}).ok());
  auto pid = ReadFileTrimmed(Mps().PipeDir(kGpuA) + "/nvidia-cuda-mps-control.pid");
  ASSERT_TRUE(pid.ok());
  ASSERT_EQ(::kill(std::stoi(*pid), SIGKILL), 0);
  std::vector<MpsFailure> failed;
  for (int64_t now = 0; failed.empty() && now < 2000 * 50; now += 2000) {
    failed = Mps().Check({{"1.1", kGpuA, "alice"}}, now);
  }
  ASSERT_EQ(failed.size(), 1u);
  // Gone, or (caught while it exits) no longer answering.
  EXPECT_THAT(failed[0].reason,
              testing::AnyOf(HasSubstr("the MPS control daemon (pid " + *pid + ") is gone"),
                             HasSubstr("the MPS control daemon does not answer")));
}

TEST_F(MpsTest, AnAgentRestartedTakesOverTheDaemonsItLeft) {
  ASSERT_TRUE(Mps().Acquire(kGpuA, "alice", {}).ok());
  mps_.reset();  // the agent restarts; the daemon runs on
  EXPECT_TRUE(Mps().Running().empty());
  ASSERT_TRUE(Mps().Acquire(kGpuA, "alice", {}).ok());
  EXPECT_THAT(Mps().Running(), ElementsAre(kGpuA));
  EXPECT_THAT(Commands(), ElementsAre("-d"));  // not started twice
  Mps().Release({});
  EXPECT_THAT(Commands(), ElementsAre("-d", "quit"));
}

TEST_F(MpsTest, APipeDirectoryTooLongForItsSocketsIsAClearError) {
  MpsDaemons deep({GPUPOOL_FAKE_MPS_CONTROL, dir_ + "/" + std::string(80, 'd'), 10'000});
  auto pipe = deep.Acquire(kGpuA, "alice", {});
  ASSERT_FALSE(pipe.ok());
  EXPECT_THAT(pipe.status().message(),
              HasSubstr("too long for the Unix sockets MPS makes there; set mps_dir"));
  EXPECT_TRUE(Record().empty());
}

TEST_F(MpsTest, AStrangeGpuNameIsRefusedNotFollowed) {
  auto bad = Mps().Acquire("../etc", "alice", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("not a name MPS directories can take"));
  EXPECT_FALSE(fs::exists(dir_ + "/etc"));
}

}  // namespace
}  // namespace gpupool::agent
