// The framed record format that carries chunks over HTTP
// (POST /v1/blobs/chunks and POST /v1/blobs/chunks/fetch, content type
// application/x-gpupool-chunks; see docs/api.md).
//
// A body is zero or more records back to back, each
//
//   <64 lowercase hex chunk id> SP <decimal length of the frame> LF <frame bytes>
//
// where the frame is the chunk's zstd frame (blob/chunk_store.h). The length
// is 1 to 10 decimal digits without sign or leading zeros (so every body has
// exactly one encoding). Decoding is syntactic and strict: it checks the
// framing, not the frames; whoever stores or uses a frame still verifies it
// with OpenChunk. Errors name the record ("records[3] (chunk 3f9a0c1b2d4e):
// length 12 runs past the end of the body").
//
// Pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "blob/chunk_store.h"
#include "common/status.h"

namespace gpupool::blob {

inline constexpr std::string_view kChunkRecordsContentType = "application/x-gpupool-chunks";
// What a sender puts in one request body at most (frames plus headers), and
// where the server stops adding records to a fetch response. The HTTP
// server's own limit (16 MiB) leaves room above it.
inline constexpr size_t kMaxChunkRecordsBytes = 8 << 20;

// (chunk id, zstd frame), as ChunkStore::PutMany takes them.
using ChunkFrame = std::pair<ChunkId, std::string>;

// Appends one record to `out`. The id must be a chunk id and the frame
// non-empty (programmer errors: asserted).
void AppendChunkRecord(std::string& out, std::string_view id, std::string_view frame);
// The bytes one record of `frame_bytes` takes (header included).
size_t ChunkRecordBytes(size_t frame_bytes);

std::string EncodeChunkRecords(const std::vector<ChunkFrame>& records);
// The records of `body`, in order; InvalidArgument naming the first bad
// record. An empty body is zero records.
Result<std::vector<ChunkFrame>> DecodeChunkRecords(std::string_view body);

// "records[3] (chunk 3f9a0c1b2d4e)": how errors name a record.
std::string ChunkRecordName(size_t index, std::string_view id);

}  // namespace gpupool::blob
