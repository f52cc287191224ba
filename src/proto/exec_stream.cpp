#include "proto/exec_stream.h"

#include <cassert>

#include "proto/byte_order.h"

namespace gpupool::proto {

namespace {

uint16_t GetU16(std::string_view b) {
  return static_cast<uint16_t>(static_cast<uint8_t>(b[0]) << 8 | static_cast<uint8_t>(b[1]));
}

bool KnownType(uint8_t t) {
  switch (static_cast<ExecFrameType>(t)) {
    case ExecFrameType::kStdin:
    case ExecFrameType::kStdinEof:
    case ExecFrameType::kResize:
    case ExecFrameType::kSignal:
    case ExecFrameType::kStdout:
    case ExecFrameType::kStderr:
    case ExecFrameType::kExit:
    case ExecFrameType::kError:
      return true;
  }
  return false;
}

}  // namespace

std::string EncodeExecFrame(ExecFrameType type, std::string_view payload) {
  assert(payload.size() <= kMaxExecPayload);
  std::string out;
  out.reserve(kExecHeaderBytes + payload.size());
  out.push_back(static_cast<char>(type));
  PutU32(out, static_cast<uint32_t>(payload.size()));
  out.append(payload);
  return out;
}

std::string EncodeExecResize(uint16_t rows, uint16_t cols) {
  char p[4] = {static_cast<char>(rows >> 8), static_cast<char>(rows), static_cast<char>(cols >> 8),
               static_cast<char>(cols)};
  return EncodeExecFrame(ExecFrameType::kResize, std::string_view(p, 4));
}

std::string EncodeExecSignal(uint8_t signal) {
  char p = static_cast<char>(signal);
  return EncodeExecFrame(ExecFrameType::kSignal, std::string_view(&p, 1));
}

std::string EncodeExecExit(int32_t code) {
  std::string p;
  PutU32(p, static_cast<uint32_t>(code));
  return EncodeExecFrame(ExecFrameType::kExit, p);
}

Result<ExecResize> DecodeExecResize(std::string_view payload) {
  if (payload.size() != 4)
    return Status::InvalidArgument("exec resize: payload must be 4 bytes, got " +
                                   std::to_string(payload.size()));
  return ExecResize{GetU16(payload), GetU16(payload.substr(2))};
}

Result<uint8_t> DecodeExecSignal(std::string_view payload) {
  if (payload.size() != 1)
    return Status::InvalidArgument("exec signal: payload must be 1 byte, got " +
                                   std::to_string(payload.size()));
  return static_cast<uint8_t>(payload[0]);
}

Result<int32_t> DecodeExecExit(std::string_view payload) {
  if (payload.size() != 4)
    return Status::InvalidArgument("exec exit: payload must be 4 bytes, got " +
                                   std::to_string(payload.size()));
  return static_cast<int32_t>(GetU32(payload));
}

Result<std::optional<ExecFrame>> ExecFrameReader::Next() {
  if (!error_.ok()) return error_;
  std::string_view rest(buf_);
  rest.remove_prefix(pos_);
  if (rest.empty() || !KnownType(static_cast<uint8_t>(rest[0]))) {
    if (!rest.empty()) {
      error_ = Status::InvalidArgument("exec stream: unknown frame type " +
                                       std::to_string(static_cast<uint8_t>(rest[0])));
      return error_;
    }
    buf_.clear();
    pos_ = 0;
    return std::optional<ExecFrame>();
  }
  if (rest.size() < kExecHeaderBytes) return std::optional<ExecFrame>();
  uint32_t len = GetU32(rest.substr(1));
  if (len > kMaxExecPayload) {
    error_ = Status::InvalidArgument("exec stream: frame of " + std::to_string(len) +
                                     " bytes, more than " + std::to_string(kMaxExecPayload));
    return error_;
  }
  if (rest.size() < kExecHeaderBytes + len) return std::optional<ExecFrame>();
  ExecFrame f;
  f.type = static_cast<ExecFrameType>(rest[0]);
  f.payload.assign(rest.substr(kExecHeaderBytes, len));
  pos_ += kExecHeaderBytes + len;
  // Drop what was returned once it is most of the buffer, so a long
  // stream keeps the buffer near one frame without moving bytes per frame.
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > 64 * 1024 && pos_ * 2 > buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  return std::optional<ExecFrame>(std::move(f));
}

}  // namespace gpupool::proto
