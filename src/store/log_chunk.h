// The packed form of a run of log lines, as a store keeps them in one
// chunk (the SQLite backend's log_chunks rows). Pure; no I/O.
//
// Every line of a chunk belongs to the same attempt rank (the chunk's row
// says which). A line is packed as
//   zigzag varint  cursor - the previous line's cursor
//   zigzag varint  offset - the previous line's offset
//   zigzag varint  ts_ms  - the previous line's ts_ms
//   byte           stream: 0 stdout, 1 stderr, 2 event, 3 another name
//                  (then varint length and the name)
//   varint         text length, then the text's bytes
// with "previous" values of 0 before the first line, so a chunk decodes on
// its own and appending to it needs only its last line's values
// (PackState). A whole chunk may then be compressed with zstd.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "store/store.h"

namespace gpupool {

// The last packed line's values, from which the next one is packed.
struct PackState {
  int64_t cursor = 0;
  int64_t offset = 0;
  int64_t ts_ms = 0;
};

// Appends `line`, stored with `cursor`, packed to `out` and advances `prev`.
void PackLogLine(const LogLine& line, int64_t cursor, PackState& prev, std::string& out);

// The lines of a packed run, with `attempt_id` and `rank` filled in.
// DataLoss when it does not decode.
Result<std::vector<LogLine>> UnpackLogLines(std::string_view packed, const std::string& attempt_id,
                                            int32_t rank);

// zstd, and back; `raw_size` is the packed size before compression.
// CompressLogChunk returns "" if zstd failed (the caller keeps it packed).
std::string CompressLogChunk(std::string_view packed);
Result<std::string> DecompressLogChunk(std::string_view data, size_t raw_size);

}  // namespace gpupool
