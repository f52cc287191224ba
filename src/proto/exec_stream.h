// The byte protocol inside an exec tunnel stream (TunnelTarget kind exec):
// the user's CLI and the agent exchange frames, and the server relays them
// unchanged.
//
// Frame = type (1 byte), payload length (4 bytes, big-endian), payload; a
// payload is at most kMaxExecPayload bytes.
//
//   client -> agent: stdin (bytes), stdin EOF, resize (rows u16, cols u16,
//                    big-endian), signal (1 byte: the signal number; the
//                    CLI forwards e.g. SIGINT for a command without a tty)
//   agent -> client: stdout, stderr (bytes), exit (int32 big-endian: the
//                    exit code, 128+N when killed by signal N), error (a
//                    UTF-8 message, "cannot run bash: No such file or
//                    directory", followed by exit 127 or 126)
//
// Exit is the last frame the agent sends; it then closes the stream. Pure
// functions and a reader object with no I/O; a reader is not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool::proto {

enum class ExecFrameType : uint8_t {
  kStdin = 0x01,
  kStdinEof = 0x02,
  kResize = 0x03,
  kSignal = 0x04,
  kStdout = 0x11,
  kStderr = 0x12,
  kExit = 0x13,
  kError = 0x14,
};

inline constexpr size_t kExecHeaderBytes = 5;
inline constexpr size_t kMaxExecPayload = 64 * 1024;

struct ExecFrame {
  ExecFrameType type = ExecFrameType::kStdout;
  std::string payload;
  friend bool operator==(const ExecFrame&, const ExecFrame&) = default;
};

// `payload` must be at most kMaxExecPayload bytes (a programmer error
// otherwise); callers split larger data.
std::string EncodeExecFrame(ExecFrameType type, std::string_view payload = {});
// Typed builders for the frames with structured payloads.
std::string EncodeExecResize(uint16_t rows, uint16_t cols);
std::string EncodeExecSignal(uint8_t signal);
std::string EncodeExecExit(int32_t code);

// Payload readers: InvalidArgument when the payload has the wrong size.
struct ExecResize {
  uint16_t rows = 0;
  uint16_t cols = 0;
};
Result<ExecResize> DecodeExecResize(std::string_view payload);
Result<uint8_t> DecodeExecSignal(std::string_view payload);
Result<int32_t> DecodeExecExit(std::string_view payload);

// Reassembles frames from bytes as they arrive, in any split.
//
//   reader.Feed(data);
//   while (true) { auto f = reader.Next(); if (!f.ok()) fail; if (!*f) break; use **f; }
//
// After an error (an unknown type, a payload over the limit) the stream is
// unusable and every later Next returns the same error.
class ExecFrameReader {
 public:
  void Feed(std::string_view bytes) { buf_.append(bytes); }
  // The next whole frame, nullopt when more bytes are needed, or the error.
  Result<std::optional<ExecFrame>> Next();
  // Bytes fed and not yet returned as frames.
  size_t pending() const { return buf_.size() - pos_; }

 private:
  std::string buf_;
  size_t pos_ = 0;
  Status error_;
};

}  // namespace gpupool::proto
