// What the server shows of the GPU shares its agents report (Heartbeat's
// shares): only reports of attempts that hold that GPU on that node, so a
// broken or hostile agent cannot show caps or use for others' jobs.
#include "server/pool_testing.h"

namespace gpupool::server {
namespace {

TEST_F(PoolTest, ASharesReportIsShownOnlyForTheAttemptThatHoldsItsGpu) {
  auto a = *pool_->AgentHello(MakeHello("a", 1));
  auto b = *pool_->AgentHello(MakeHello("b", 1));
  JobSpec half = Spec(0);
  half.resources.gpu_milli = 500;
  ASSERT_TRUE(pool_->Submit(half, "u").ok());
  ASSERT_EQ(*pool_->Schedule(), 1);
  const std::string holder = Starts(a.node_id).empty() ? b.node_id : a.node_id;
  const std::string other = holder == a.node_id ? b.node_id : a.node_id;
  const std::string holder_gpu = (holder == a.node_id ? "a" : "b") + std::string("-gpu0");
  const std::string other_gpu = (other == a.node_id ? "a" : "b") + std::string("-gpu0");

  proto::Heartbeat own;
  own.shares = {{"1.1", holder_gpu, 40960, 1024},
                {"9.9", holder_gpu, 1, 1},  // no such attempt
                {"1.1", other_gpu, 5, 5}};  // a GPU it does not hold
  pool_->AgentHeartbeat(holder, own);
  proto::Heartbeat lie;  // the other node, about an attempt that is not its
  lie.shares = {{"1.1", other_gpu, 7, 7}, {"1.1", holder_gpu, 7, 7}};
  pool_->AgentHeartbeat(other, lie);

  auto nodes = *pool_->ListNodes();
  for (const NodeStatus& n : nodes) {
    if (n.node.id == holder) {
      EXPECT_EQ(n.shares, (std::vector<ShareUse>{{"1.1", holder_gpu, 40960, 1024}}));
    } else {
      EXPECT_TRUE(n.shares.empty()) << n.shares.size();
    }
  }
  auto use = pool_->ShareUseOf(holder, "1.1");
  ASSERT_TRUE(use.has_value());
  EXPECT_EQ(use->memory_cap_mib, 40960);
  EXPECT_EQ(use->memory_used_mib, 1024);
}

}  // namespace
}  // namespace gpupool::server
