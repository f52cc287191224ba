// Content-defined chunking (FastCDC) for the blob store.
//
// Checkpoints and job inputs are split into chunks whose boundaries depend on
// the bytes around them, not on their offsets, so an edit that inserts or
// deletes bytes changes only the chunks around it and the rest deduplicate.
//
// The algorithm is FastCDC (Xia et al., "FastCDC: a Fast and Efficient
// Content-Defined Chunking Approach for Data Deduplication", USENIX ATC 2016):
//   - a gear rolling hash, h = (h << 1) + kGear[byte], over a table of 256
//     fixed 64-bit constants (chunker.cpp). A bit k of h depends only on the
//     last k + 1 bytes, so the top bits see a 64-byte window and no byte needs
//     to be "rolled out";
//   - the first min_size bytes of a chunk are skipped (never a cut point);
//   - normalized chunking, level 2: with b = log2(avg_size), a position before
//     avg_size is a cut point when the top b + 2 bits of h are zero (a
//     stricter test, probability 2^-(b+2)), from avg_size on when the top
//     b - 2 bits are zero (a looser one, 2^-(b-2)). Chunk sizes concentrate
//     around avg_size: on random data with the default options the mean is
//     about 1.1 x avg_size and fewer than 1 in 5 chunks is shorter than it;
//   - a chunk ends at max_size at the latest.
//
// ON-DISK FORMAT: the cut points, hence every chunk id of every stored blob,
// are a function of the gear table, the mask rule above and the options.
// Changing any of them (even one table constant) re-chunks every file and
// defeats deduplication against everything already stored; chunker_test.cpp
// pins the cut points of a fixed input ("Golden") so that such a change
// cannot go unnoticed. A store must record the options it chunked with.
//
// Everything here is pure: no I/O, no globals but the constant table, no
// allocation in NextChunkLength. Safe to call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace gpupool::blob {

// The defaults are what checkpoints and job inputs use. 16 KiB on average:
// a checkpoint with scattered small changes uploads no more than rsync would
// (docs/performance.md, "Incremental upload"); larger chunks cost several
// times the bytes, smaller ones more per-chunk overhead (ids, files).
struct ChunkerOptions {
  size_t min_size = 4 * 1024;
  size_t avg_size = 16 * 1024;  // a power of two
  size_t max_size = 64 * 1024;
};

// OK when 64 <= min_size < avg_size < max_size <= 64 MiB and avg_size is a
// power of two; otherwise InvalidArgument naming the field ("avg_size: ...").
Status ValidateChunkerOptions(const ChunkerOptions& o);

// The length of the first chunk of `data`: a content-defined cut point in
// (min_size, max_size], or data.size() when data is no longer than min_size
// (or has no cut point before its end). Only the first max_size bytes are
// read. A caller streaming a file passes at least max_size bytes (or all that
// is left at the end of the file) and calls again after the cut; then the cuts
// are the same as ChunkLengths over the whole file. Passing fewer bytes in the
// middle of a file forces a cut at the end of the buffer.
// Precondition: ValidateChunkerOptions(o) is OK (asserted in debug builds).
size_t NextChunkLength(std::span<const uint8_t> data, const ChunkerOptions& o);

// All chunk lengths of `data`, in order; they sum to data.size(), and all but
// the last are in (min_size, max_size]. Empty for empty data.
// Precondition: ValidateChunkerOptions(o) is OK.
std::vector<size_t> ChunkLengths(std::span<const uint8_t> data, const ChunkerOptions& o);

}  // namespace gpupool::blob
