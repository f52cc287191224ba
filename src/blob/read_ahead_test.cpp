#include "blob/read_ahead.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace gpupool::blob {
namespace {

VerifiedChunk Chunk(int i, size_t bytes = 10) {
  return {std::to_string(i), "", std::string(bytes, static_cast<char>('a' + i % 26))};
}

TEST(ChunkReadAheadTest, HandsOverEverythingInOrderThenTheProducersError) {
  ChunkReadAhead ahead([](const ChunkSink& push) {
    for (int i = 0; i < 100; ++i) GP_RETURN_IF_ERROR(push(Chunk(i)));
    return Status::Unavailable("server gone");
  });
  for (int i = 0; i < 100; ++i) {
    auto c = ahead.Next();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->id, std::to_string(i));
  }
  EXPECT_EQ(ahead.Next().status(), Status::Unavailable("server gone"));
  EXPECT_EQ(ahead.Next().status().code(), StatusCode::kUnavailable);
}

TEST(ChunkReadAheadTest, AskingPastTheEndIsInternal) {
  ChunkReadAhead ahead([](const ChunkSink& push) { return push(Chunk(0)); });
  ASSERT_TRUE(ahead.Next().ok());
  EXPECT_EQ(ahead.Next().status().code(), StatusCode::kInternal);
}

TEST(ChunkReadAheadTest, HoldsAtMostItsLimitAhead) {
  std::atomic<int> pushed{0};
  ChunkReadAhead ahead(
      [&](const ChunkSink& push) {
        for (int i = 0; i < 20; ++i) {
          GP_RETURN_IF_ERROR(push(Chunk(i, 100)));
          ++pushed;
        }
        return Status::Ok();
      },
      /*max_bytes=*/350);
  // Three chunks of 100 bytes fit; the fourth waits for the reader.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(pushed.load(), 3);
  ASSERT_TRUE(ahead.Next().ok());
  // Taking one makes room for the fourth (awaited, with a generous deadline).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (pushed.load() < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(pushed.load(), 4);
}

TEST(ChunkReadAheadTest, AChunkLargerThanTheLimitStillPasses) {
  ChunkReadAhead ahead([](const ChunkSink& push) { return push(Chunk(0, 1000)); }, 10);
  auto c = ahead.Next();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->bytes.size(), 1000u);
}

TEST(ChunkReadAheadTest, DestroyingItStopsTheProducer) {
  std::atomic<bool> refused{false};
  {
    ChunkReadAhead ahead(
        [&](const ChunkSink& push) {
          for (int i = 0;; ++i) {
            if (Status s = push(Chunk(i, 100)); !s.ok()) {
              refused = true;
              return s;
            }
          }
        },
        1000);
    ASSERT_TRUE(ahead.Next().ok());
  }  // joins the producer, which is waiting for room
  EXPECT_TRUE(refused.load());
}

}  // namespace
}  // namespace gpupool::blob
