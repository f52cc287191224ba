#include "blob/chunker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace gpupool::blob {
namespace {

using ::testing::HasSubstr;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

// `n` bytes from std::mt19937_64 (whose output the standard fixes), taken
// little-endian by shifts, so the data is the same on every platform.
std::vector<uint8_t> RandomByteVector(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = rng();
    for (size_t b = 0; b < 8 && i + b < n; ++b) out[i + b] = static_cast<uint8_t>(v >> (8 * b));
  }
  return out;
}

std::string_view View(const std::vector<uint8_t>& data, size_t offset, size_t len) {
  return {reinterpret_cast<const char*>(data.data()) + offset, len};
}

// The share (by bytes) of `edited`'s chunks whose contents are also a chunk
// of `original`: what a store holding `original` would not store again.
double SharedFraction(const std::vector<uint8_t>& original, const std::vector<uint8_t>& edited,
                      const ChunkerOptions& o) {
  std::unordered_set<size_t> known;
  size_t offset = 0;
  for (size_t len : ChunkLengths(original, o)) {
    known.insert(std::hash<std::string_view>{}(View(original, offset, len)));
    offset += len;
  }
  size_t shared = 0;
  offset = 0;
  for (size_t len : ChunkLengths(edited, o)) {
    if (known.contains(std::hash<std::string_view>{}(View(edited, offset, len)))) shared += len;
    offset += len;
  }
  return static_cast<double>(shared) / static_cast<double>(edited.size());
}

// Checks the invariants of ChunkLengths: the lengths sum to the input and
// all but the last are in (min_size, max_size].
void ExpectWellFormed(const std::vector<size_t>& lengths, size_t size, const ChunkerOptions& o) {
  EXPECT_EQ(std::accumulate(lengths.begin(), lengths.end(), size_t{0}), size);
  for (size_t i = 0; i + 1 < lengths.size(); ++i) {
    ASSERT_GT(lengths[i], o.min_size) << "chunk " << i;
    ASSERT_LE(lengths[i], o.max_size) << "chunk " << i;
  }
  if (!lengths.empty()) {
    EXPECT_GT(lengths.back(), 0u);
    EXPECT_LE(lengths.back(), o.max_size);
  }
}

const ChunkerOptions kDefault;
const ChunkerOptions kWide{.min_size = 16 * kKiB, .avg_size = 64 * kKiB, .max_size = 256 * kKiB};
const ChunkerOptions kSmall{.min_size = 2 * kKiB, .avg_size = 8 * kKiB, .max_size = 32 * kKiB};
const ChunkerOptions kTiny{.min_size = 64, .avg_size = 128, .max_size = 256};

// ---------------------------------------------------------------------------
// Sizes

TEST(ChunkLengths, RandomDataSizesAndMean) {
  const std::vector<uint8_t> data = RandomByteVector(64 * kMiB, 1);
  const std::vector<size_t> lengths = ChunkLengths(data, kDefault);
  ExpectWellFormed(lengths, data.size(), kDefault);
  const double mean = static_cast<double>(data.size()) / static_cast<double>(lengths.size());
  EXPECT_GE(mean, 0.6 * kDefault.avg_size) << lengths.size() << " chunks";
  EXPECT_LE(mean, 1.6 * kDefault.avg_size) << lengths.size() << " chunks";

  // Normalized chunking, level 2: the strict mask makes a cut before
  // avg_size rare (expected 1 - exp(-48K / 256K) = 17% of the chunks; 53%
  // without normalization, 31% with level 1), the loose one makes chunks
  // longer than 2 x avg_size rarer still (~1.5%; ~9% with level 1).
  size_t below_avg = 0;
  size_t above_twice_avg = 0;
  for (size_t i = 0; i + 1 < lengths.size(); ++i) {
    below_avg += lengths[i] < kDefault.avg_size;
    above_twice_avg += lengths[i] > 2 * kDefault.avg_size;
  }
  const double n = static_cast<double>(lengths.size() - 1);
  EXPECT_GE(below_avg / n, 0.08);
  EXPECT_LE(below_avg / n, 0.26);
  EXPECT_LE(above_twice_avg / n, 0.05);
}

TEST(ChunkLengths, OtherOptionsKeepTheBoundsAndMean) {
  const std::vector<uint8_t> data = RandomByteVector(8 * kMiB, 2);
  for (const ChunkerOptions& o :
       {kSmall, kTiny,
        ChunkerOptions{.min_size = 256 * kKiB, .avg_size = kMiB, .max_size = 4 * kMiB},
        ChunkerOptions{.min_size = 1000, .avg_size = 4 * kKiB, .max_size = 5000}}) {
    SCOPED_TRACE(std::to_string(o.min_size) + "/" + std::to_string(o.avg_size) + "/" +
                 std::to_string(o.max_size));
    const std::vector<size_t> lengths = ChunkLengths(data, o);
    ExpectWellFormed(lengths, data.size(), o);
    const double mean = static_cast<double>(data.size()) / static_cast<double>(lengths.size());
    EXPECT_GE(mean, 0.6 * static_cast<double>(o.avg_size));
    EXPECT_LE(mean, 1.6 * static_cast<double>(o.avg_size));
  }
}

TEST(ChunkLengths, AllZerosCutAtMaxSize) {
  for (const ChunkerOptions& o : {kDefault, kSmall}) {
    const std::vector<uint8_t> zeros(4 * o.max_size + 1000, 0);
    const std::vector<size_t> lengths = ChunkLengths(zeros, o);
    EXPECT_THAT(lengths, ::testing::ElementsAre(o.max_size, o.max_size, o.max_size, o.max_size,
                                                size_t{1000}));
  }
}

TEST(ChunkLengths, ShortInputIsOneChunk) {
  const std::vector<uint8_t> data = RandomByteVector(kDefault.min_size + 1, 3);
  EXPECT_TRUE(ChunkLengths(std::span<const uint8_t>(), kDefault).empty());
  EXPECT_THAT(ChunkLengths(std::span(data).first(1), kDefault), ::testing::ElementsAre(1u));
  EXPECT_THAT(ChunkLengths(std::span(data).first(kDefault.min_size - 1), kDefault),
              ::testing::ElementsAre(kDefault.min_size - 1));
  EXPECT_EQ(NextChunkLength(std::span(data).first(kDefault.min_size), kDefault), kDefault.min_size);
  EXPECT_EQ(NextChunkLength(std::span(data).first(100), kDefault), 100u);
}

// ---------------------------------------------------------------------------
// Determinism and streaming

TEST(ChunkLengths, Deterministic) {
  const std::vector<uint8_t> data = RandomByteVector(8 * kMiB, 4);
  const std::vector<size_t> first = ChunkLengths(data, kDefault);
  EXPECT_EQ(ChunkLengths(data, kDefault), first);
  // A copy at another address (and alignment) cuts the same.
  std::vector<uint8_t> shifted(data.size() + 3);
  std::copy(data.begin(), data.end(), shifted.begin() + 3);
  EXPECT_EQ(ChunkLengths(std::span(shifted).subspan(3), kDefault), first);
  // Different data cuts differently.
  EXPECT_NE(ChunkLengths(RandomByteVector(8 * kMiB, 5), kDefault), first);
}

// The cut points of a fixed input, recorded when the chunker was written. The
// gear table, the masks and the normalization are part of the on-disk format
// (chunker.h): if this test fails, stored chunk ids no longer match.
TEST(ChunkLengths, Golden) {
  const std::vector<uint8_t> data = RandomByteVector(kMiB, 42);
  EXPECT_EQ(ChunkLengths(data, kWide),
            (std::vector<size_t>{84355, 56488, 56648, 68174, 86724, 62951, 105691, 71042, 69401,
                                 94372, 77452, 76677, 98871, 39730}));
  EXPECT_EQ(ChunkLengths(std::span(data).first(64 * kKiB), kSmall),
            (std::vector<size_t>{9174, 9247, 15247, 9905, 10582, 2295, 9086}));
}

// Reads a "file" in blocks of an odd size, as a store would, and chunks it
// with NextChunkLength on a buffer holding at least max_size bytes (or the
// rest of the file).
std::vector<size_t> StreamedLengths(const std::vector<uint8_t>& file, size_t block,
                                    const ChunkerOptions& o) {
  std::vector<size_t> lengths;
  std::vector<uint8_t> buffer;
  size_t read = 0;
  while (read < file.size() || !buffer.empty()) {
    while (buffer.size() < o.max_size && read < file.size()) {
      const size_t n = std::min(block, file.size() - read);
      buffer.insert(buffer.end(), file.begin() + read, file.begin() + read + n);
      read += n;
    }
    const size_t len = NextChunkLength(buffer, o);
    EXPECT_GT(len, 0u);
    lengths.push_back(len);
    buffer.erase(buffer.begin(), buffer.begin() + len);
  }
  return lengths;
}

TEST(NextChunkLength, StreamingGivesTheSameCutsAsTheWhole) {
  const std::vector<uint8_t> data = RandomByteVector(8 * kMiB + 12345, 6);
  for (const ChunkerOptions& o : {kDefault, kSmall, kTiny}) {
    SCOPED_TRACE(o.avg_size);
    const std::vector<size_t> whole = ChunkLengths(data, o);
    EXPECT_EQ(StreamedLengths(data, 100'003, o), whole);
    EXPECT_EQ(StreamedLengths(data, 4096, o), whole);
  }
}

TEST(NextChunkLength, ReadsOnlyTheFirstMaxSizeBytes) {
  const std::vector<uint8_t> data = RandomByteVector(4 * kMiB, 7);
  std::vector<uint8_t> changed = data;
  size_t offset = 0;
  for (int i = 0; i < 20; ++i) {
    std::span<const uint8_t> rest = std::span(data).subspan(offset);
    const size_t len = NextChunkLength(rest, kDefault);
    EXPECT_EQ(NextChunkLength(rest.first(kDefault.max_size), kDefault), len);
    // Bytes past max_size do not matter.
    for (size_t j = offset + kDefault.max_size; j < changed.size(); j += 997) changed[j] ^= 0x5a;
    EXPECT_EQ(NextChunkLength(std::span(changed).subspan(offset), kDefault), len);
    changed = data;
    offset += len;
  }
}

// ---------------------------------------------------------------------------
// Boundaries survive edits

TEST(ChunkLengths, InsertionKeepsMostChunks) {
  const std::vector<uint8_t> original = RandomByteVector(8 * kMiB, 8);
  const std::vector<uint8_t> inserted = RandomByteVector(100, 9);
  std::vector<uint8_t> edited = original;
  edited.insert(edited.begin() + static_cast<ptrdiff_t>(original.size() / 2), inserted.begin(),
                inserted.end());
  EXPECT_GE(SharedFraction(original, edited, kDefault), 0.95);
  EXPECT_GE(SharedFraction(original, edited, kSmall), 0.95);
  // Cutting at fixed offsets would share only the first half.
  EXPECT_LT(
      SharedFraction(original, edited,
                     {.min_size = 64 * kKiB - 1, .avg_size = 64 * kKiB, .max_size = 64 * kKiB + 1}),
      0.6);
}

TEST(ChunkLengths, DeletionKeepsMostChunks) {
  const std::vector<uint8_t> original = RandomByteVector(8 * kMiB, 10);
  // original[0, half) + original[half + 100, end)
  const auto middle = original.begin() + static_cast<ptrdiff_t>(original.size() / 2);
  std::vector<uint8_t> edited(original.begin(), middle);
  edited.insert(edited.end(), middle + 100, original.end());
  ASSERT_EQ(edited.size(), original.size() - 100);
  EXPECT_GE(SharedFraction(original, edited, kDefault), 0.95);
  EXPECT_GE(SharedFraction(original, edited, kSmall), 0.95);
}

// Ten 1-byte edits (a change, an insertion, a deletion, in turn) at random
// places. Each one costs at least the chunk it falls in (a chunk that a random
// byte falls in is ~1.3 x avg_size long on average, by size bias), so with
// 64 KiB chunks 10 edits cost about 10 x 85 KiB = 10% of 8 MiB: the 95% bar
// needs the 8 KiB chunks (about 1.3%); with 64 KiB chunks we ask for 85%.
TEST(ChunkLengths, ScatteredEditsKeepMostChunks) {
  const std::vector<uint8_t> original = RandomByteVector(8 * kMiB, 11);
  std::vector<uint8_t> edited = original;
  std::mt19937_64 rng(12);
  for (int i = 0; i < 10; ++i) {
    const size_t at = rng() % (edited.size() - 1);
    const auto it = edited.begin() + static_cast<ptrdiff_t>(at);
    switch (i % 3) {
      case 0:
        *it ^= 0x01;
        break;
      case 1:
        edited.insert(it, static_cast<uint8_t>(rng()));
        break;
      case 2:
        edited.erase(it);
        break;
    }
  }
  ASSERT_NE(edited, original);
  EXPECT_GE(SharedFraction(original, edited, kSmall), 0.95);
  EXPECT_GE(SharedFraction(original, edited, kDefault), 0.85);
}

// ---------------------------------------------------------------------------
// Options

TEST(ValidateChunkerOptions, AcceptsGoodOptions) {
  EXPECT_TRUE(ValidateChunkerOptions(kDefault).ok());
  EXPECT_TRUE(ValidateChunkerOptions(kSmall).ok());
  EXPECT_TRUE(ValidateChunkerOptions(kTiny).ok());
  EXPECT_TRUE(
      ValidateChunkerOptions({.min_size = kMiB, .avg_size = 16 * kMiB, .max_size = 64 * kMiB})
          .ok());
}

TEST(ValidateChunkerOptions, RejectsBadOptionsNamingTheField) {
  struct Case {
    ChunkerOptions o;
    std::string message;
  };
  const Case cases[] = {
      {{.min_size = 63, .avg_size = 128, .max_size = 256}, "min_size: must be at least 64"},
      {{.min_size = 0, .avg_size = 128, .max_size = 256}, "min_size: must be at least 64"},
      {{.min_size = 16 * kKiB, .avg_size = 60 * kKiB, .max_size = 256 * kKiB},
       "avg_size: must be a power of two"},
      {{.min_size = 16 * kKiB, .avg_size = 0, .max_size = 256 * kKiB},
       "avg_size: must be a power of two"},
      {{.min_size = 64 * kKiB, .avg_size = 64 * kKiB, .max_size = 256 * kKiB},
       "avg_size: must be greater than min_size"},
      {{.min_size = 100 * kKiB, .avg_size = 64 * kKiB, .max_size = 256 * kKiB},
       "avg_size: must be greater than min_size"},
      {{.min_size = 16 * kKiB, .avg_size = 64 * kKiB, .max_size = 64 * kKiB},
       "max_size: must be greater than avg_size"},
      {{.min_size = 16 * kKiB, .avg_size = 64 * kKiB, .max_size = 32 * kKiB},
       "max_size: must be greater than avg_size"},
      {{.min_size = kMiB, .avg_size = 32 * kMiB, .max_size = 64 * kMiB + 1},
       "max_size: must be at most 64 MiB"},
  };
  for (const Case& c : cases) {
    const Status s = ValidateChunkerOptions(c.o);
    ASSERT_FALSE(s.ok()) << c.message;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace gpupool::blob
