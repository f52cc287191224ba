#include "server/agent_limits.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool::server {
namespace {

using ::testing::HasSubstr;

TEST(TokenBucketTest, SpendsTheBurstThenRefillsAtTheRate) {
  TokenBucket b(10, 20, 0);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(b.Take(1, 0), 0) << i;
  EXPECT_EQ(b.Take(1, 0), 100);  // one token short: 100 ms at 10/s
  EXPECT_EQ(b.Take(1, 200), 0);  // two came back, one was owed
  EXPECT_EQ(b.Take(1, 200), 100);
  // Never more than the burst, however long it rested.
  TokenBucket c(10, 5, 0);
  EXPECT_EQ(c.Take(5, 1'000'000), 0);
  EXPECT_GT(c.Take(1, 1'000'000), 0);
}

TEST(ChannelBudgetTest, RefusesOversizedMessagesAndFloodsButPacesBytes) {
  ChannelLimits l;
  l.max_text_bytes = 1000;
  l.max_binary_bytes = 100;
  l.messages_per_s = 10;
  l.message_burst = 10;
  l.frames_per_s = 5;
  l.frame_burst = 5;
  l.text_bytes_per_s = 1000;
  l.text_byte_burst = 1000;
  ChannelBudget b(l, 0);
  EXPECT_THAT(b.OnText(1001, 0).refuse, HasSubstr("1001 bytes is over the agent channel's limit"));
  EXPECT_THAT(b.OnBinary(101, 0).refuse, HasSubstr("tunnel frame of 101 bytes"));
  // Bytes over their budget pause reading until they are paid back.
  auto first = b.OnText(900, 0);
  EXPECT_TRUE(first.refuse.empty());
  EXPECT_EQ(first.pause_ms, 0);
  auto second = b.OnText(600, 0);
  EXPECT_TRUE(second.refuse.empty());
  EXPECT_EQ(second.pause_ms, 500);
  // The 10-message burst is spent after 8 more; the next is a flood.
  for (int i = 0; i < 7; ++i) EXPECT_TRUE(b.OnText(1, 10'000).refuse.empty()) << i;
  EXPECT_TRUE(b.OnText(1, 10'000).refuse.empty());
  EXPECT_TRUE(b.OnText(1, 10'000).refuse.empty());
  EXPECT_TRUE(b.OnText(1, 10'000).refuse.empty());
  EXPECT_THAT(b.OnText(1, 10'000).refuse,
              HasSubstr("flooding: more than 10 messages a second (burst 10)"));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(b.OnBinary(10, 0).refuse.empty());
  EXPECT_THAT(b.OnBinary(10, 0).refuse, HasSubstr("more than 5 tunnel frames a second"));
}

proto::Hello HelloWith(int gpus) {
  proto::Hello h;
  h.node_name = "n";
  h.cpu_milli = 64'000;
  h.memory_mib = 512 << 10;
  for (int i = 0; i < gpus; ++i)
    h.gpus.push_back({i, "GPU-" + std::to_string(i), "H100", 81920, 9, 0, false, i});
  return h;
}

TEST(HelloClaimsTest, BelievableMachinesPass) {
  EXPECT_TRUE(CheckHelloClaims(HelloWith(0), {}).ok());
  EXPECT_TRUE(CheckHelloClaims(HelloWith(16), {}).ok());
}

TEST(HelloClaimsTest, ImpossibleClaimsNameTheField) {
  NodeClaimLimits l;
  auto many = CheckHelloClaims(HelloWith(65), l);
  EXPECT_EQ(many.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(many.message(), HasSubstr("gpus: 65 GPUs on one node; at most 64"));

  proto::Hello h = HelloWith(2);
  h.gpus[1].memory_mib = l.max_gpu_memory_mib + 1;
  EXPECT_THAT(CheckHelloClaims(h, l).message(), HasSubstr("gpus[1].memory_mib"));
  h = HelloWith(2);
  h.gpus[1].uuid = "GPU-0";
  EXPECT_THAT(CheckHelloClaims(h, l).message(), HasSubstr("gpus[1].uuid: GPU-0 is listed twice"));
  h = HelloWith(2);
  h.gpus[1].index = 0;
  EXPECT_THAT(CheckHelloClaims(h, l).message(), HasSubstr("gpus[1].index: 0 is listed twice"));
  h = HelloWith(1);
  h.cpu_milli = l.max_cpu_milli + 1000;
  EXPECT_THAT(CheckHelloClaims(h, l).message(), HasSubstr("cpu_milli"));
  h = HelloWith(1);
  h.memory_mib = l.max_memory_mib + 1;
  EXPECT_THAT(CheckHelloClaims(h, l).message(), HasSubstr("memory_mib"));
}

// The instances of one GPU in MIG mode share its index; nothing else may.
TEST(HelloClaimsTest, MigInstancesShareTheirParentsIndex) {
  NodeClaimLimits l;
  proto::Hello h = HelloWith(1);  // GPU-0, index 0: a whole GPU
  for (int i = 0; i < 3; ++i) {
    GpuInfo g{1, "MIG-" + std::to_string(i), "A100", 9728, 8, 0, false, 1};
    g.parent_uuid = "GPU-1";
    g.mig_profile = "1g.10gb";
    g.mig_slices = 1;
    h.gpus.push_back(g);
  }
  EXPECT_TRUE(CheckHelloClaims(h, l).ok()) << CheckHelloClaims(h, l).message();
  proto::Hello other = h;
  other.gpus[2].parent_uuid = "GPU-7";  // another GPU's instance at index 1
  EXPECT_THAT(CheckHelloClaims(other, l).message(), HasSubstr("gpus[2].index: 1 is listed twice"));
  other = h;
  other.gpus[1].index = 0;  // an instance at the whole GPU's index
  EXPECT_THAT(CheckHelloClaims(other, l).message(), HasSubstr("gpus[1].index: 0 is listed twice"));
  other = h;
  other.gpus[3].parent_uuid = "GPU-0";  // a parent offered whole as well
  other.gpus[3].index = 0;
  EXPECT_THAT(CheckHelloClaims(other, l).message(),
              HasSubstr("GPU-0 is listed as a whole GPU as well as in MIG mode"));
}

TEST(GpuOwnersTest, AGpuStaysWithItsNode) {
  GpuOwners owners;
  owners.Reset({{"a", {"GPU-a0", "GPU-a1"}}, {"b", {"GPU-b0"}}});
  proto::Hello h = HelloWith(0);
  h.gpus.push_back({0, "GPU-x", "A100", 1, 8, 0});
  h.gpus.push_back({1, "GPU-b0", "A100", 1, 8, 0});
  auto conflict = owners.Conflict("a", h.gpus);
  ASSERT_TRUE(conflict);
  EXPECT_EQ(conflict->first, 1u);
  EXPECT_EQ(conflict->second, "b");
  EXPECT_FALSE(owners.Conflict("b", h.gpus));  // its own
  // Node a's GPUs change: the old ones are free, the new ones taken.
  owners.Claim("a", {{0, "GPU-a9", "A100", 1, 8, 0}});
  EXPECT_FALSE(owners.Conflict("c", {{0, "GPU-a0", "A100", 1, 8, 0}}));
  EXPECT_TRUE(owners.Conflict("c", {{0, "GPU-a9", "A100", 1, 8, 0}}));
  // A node forgotten (left, revoked) holds nothing.
  owners.Reset({{"a", {"GPU-a9"}}});
  EXPECT_FALSE(owners.Conflict("c", {{0, "GPU-b0", "A100", 1, 8, 0}}));
}

}  // namespace
}  // namespace gpupool::server
