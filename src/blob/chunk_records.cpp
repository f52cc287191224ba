#include "blob/chunk_records.h"

#include <cassert>
#include <charconv>
#include <cstdint>

namespace gpupool::blob {
namespace {

constexpr size_t kIdDigits = 64;
constexpr size_t kMaxLengthDigits = 10;
// A header is at most id, space, 10 digits, newline.
constexpr size_t kMaxHeaderBytes = kIdDigits + 1 + kMaxLengthDigits + 1;

size_t DecimalDigits(size_t n) {
  size_t digits = 1;
  while (n >= 10) {
    n /= 10;
    ++digits;
  }
  return digits;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The frame length in `text`: digits only, no leading zero, not zero.
Result<size_t> ParseLength(std::string_view text) {
  if (text.empty()) return Status::InvalidArgument("missing frame length");
  if (text.size() > kMaxLengthDigits) {
    return Status::InvalidArgument("frame length has more than 10 digits");
  }
  for (char c : text) {
    if (!IsDigit(c)) return Status::InvalidArgument("frame length must be decimal digits");
  }
  if (text[0] == '0') {
    return Status::InvalidArgument(text.size() == 1 ? "frame length must not be 0"
                                                    : "frame length has a leading zero");
  }
  uint64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return static_cast<size_t>(value);
}

struct Header {
  std::string_view id;
  size_t frame_bytes = 0;
  size_t header_bytes = 0;
};

// Parses the header at the start of `rest`. On error, `id` (when it could be
// read) is still returned through the status's naming by the caller.
Result<Header> ParseHeader(std::string_view rest) {
  size_t newline = rest.substr(0, kMaxHeaderBytes).find('\n');
  if (newline == std::string_view::npos) {
    return Status::InvalidArgument("header is not terminated by a newline");
  }
  std::string_view line = rest.substr(0, newline);
  size_t space = line.find(' ');
  if (space == std::string_view::npos) {
    return Status::InvalidArgument("header must be \"<id> <length>\"");
  }
  Header h;
  h.id = line.substr(0, space);
  if (!IsChunkId(h.id)) {
    return Status::InvalidArgument("chunk id must be 64 lowercase hex digits");
  }
  GP_ASSIGN_OR_RETURN(h.frame_bytes, ParseLength(line.substr(space + 1)));
  h.header_bytes = newline + 1;
  return h;
}

// The id as far as it can be read from a (possibly malformed) header.
std::string_view LeadingId(std::string_view rest) {
  std::string_view id = rest.substr(0, kIdDigits);
  return IsChunkId(id) ? id : std::string_view{};
}

}  // namespace

std::string ChunkRecordName(size_t index, std::string_view id) {
  std::string name = "records[" + std::to_string(index) + "]";
  if (!id.empty()) name += " (chunk " + std::string(id.substr(0, 12)) + ")";
  return name;
}

size_t ChunkRecordBytes(size_t frame_bytes) {
  return kIdDigits + 1 + DecimalDigits(frame_bytes) + 1 + frame_bytes;
}

void AppendChunkRecord(std::string& out, std::string_view id, std::string_view frame) {
  assert(IsChunkId(id) && !frame.empty());
  out.reserve(out.size() + ChunkRecordBytes(frame.size()));
  out.append(id);
  out.push_back(' ');
  out.append(std::to_string(frame.size()));
  out.push_back('\n');
  out.append(frame);
}

std::string EncodeChunkRecords(const std::vector<ChunkFrame>& records) {
  size_t total = 0;
  for (const auto& [id, frame] : records) total += ChunkRecordBytes(frame.size());
  std::string out;
  out.reserve(total);
  for (const auto& [id, frame] : records) AppendChunkRecord(out, id, frame);
  return out;
}

Result<std::vector<ChunkFrame>> DecodeChunkRecords(std::string_view body) {
  std::vector<ChunkFrame> records;
  size_t pos = 0;
  while (pos < body.size()) {
    std::string_view rest = body.substr(pos);
    Result<Header> header = ParseHeader(rest);
    if (!header.ok()) {
      return header.status().WithContext(ChunkRecordName(records.size(), LeadingId(rest)));
    }
    size_t available = rest.size() - header->header_bytes;
    if (header->frame_bytes > available) {
      return Status::InvalidArgument(ChunkRecordName(records.size(), header->id) + ": length " +
                                     std::to_string(header->frame_bytes) +
                                     " runs past the end of the body (" +
                                     std::to_string(available) + " bytes left)");
    }
    records.emplace_back(std::string(header->id),
                         std::string(rest.substr(header->header_bytes, header->frame_bytes)));
    pos += header->header_bytes + header->frame_bytes;
  }
  return records;
}

}  // namespace gpupool::blob
