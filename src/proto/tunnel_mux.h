// Byte streams multiplexed over one connection (the agent's WebSocket, for
// interactive sessions' tunnels), with credit-based flow control as in SSH
// channels and HTTP/2.
//
// The receiver of a stream grants its sender a window of bytes; the sender
// never has more than the window in flight, and the receiver grants more as
// its application consumes what arrived (Consumed). A stream whose reader is
// slow therefore holds at most one window in flight and in the receiver's
// buffer, and the connection keeps carrying the others. Data frames carry at
// most `max_frame` bytes and are taken from the streams round-robin, so a
// busy stream delays another stream by at most one frame per stream; control
// frames (open, window, close) go first. The caller sends the channel's own
// messages before asking for the next tunnel frame, so those wait at most
// one data frame too.
//
// Frames (binary; EncodeTunnelFrame): open (target, and the opener's window
// for the reverse direction), window (a credit), data (bytes), close (the
// sender will send no more: a reason, empty for a clean end). The acceptor
// of an open answers with a window frame granting its own window; until a
// grant arrives a side sends no data. A stream is forgotten once both sides
// have sent their close. The side that opens streams with odd ids is the
// server; the agent uses even ids, so both may open at once.
//
// Pure: no sockets, no clock; the caller moves frames with NextFrame() and
// OnFrame(). Not thread-safe: owned by one event loop.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool::proto {

enum class TunnelFrameKind : uint8_t { kOpen = 1, kWindow = 2, kData = 3, kClose = 4 };

struct TunnelFrame {
  TunnelFrameKind kind = TunnelFrameKind::kData;
  uint32_t stream = 0;
  // open: what to connect to ("tcp:8888"); data: the bytes; close: the reason.
  std::string payload;
  uint32_t credit = 0;  // open: the opener's window; window: the bytes granted
  friend bool operator==(const TunnelFrame&, const TunnelFrame&) = default;
};

// Layout: kind (1 byte), stream (4 bytes, big-endian), for open and window
// the credit (4 bytes, big-endian), then the payload.
std::string EncodeTunnelFrame(const TunnelFrame& f);
// InvalidArgument for a short frame, an unknown kind or stream 0.
Result<TunnelFrame> DecodeTunnelFrame(std::string_view bytes);

struct TunnelMuxOptions {
  uint32_t window = 256 * 1024;    // what the peer may have in flight per stream, to us
  uint32_t max_frame = 64 * 1024;  // data bytes per frame
  size_t max_buffered = 1 << 20;   // per stream: written, not yet sent (Write's limit)
  bool opens_odd = true;           // the server opens odd ids, the agent even ones
};

class TunnelMux {
 public:
  // What the peer did, as the application sees it. `data` is called in
  // order; the application calls Consumed once it has used the bytes.
  struct Events {
    std::function<void(uint32_t stream, const std::string& target)> opened;
    std::function<void(uint32_t stream, std::string_view data)> data;
    // The peer will send no more on the stream (reason empty: a clean end).
    std::function<void(uint32_t stream, const std::string& reason)> closed;
  };

  TunnelMux(TunnelMuxOptions options, Events events);

  // Opens a stream to `target` and returns its id.
  uint32_t Open(std::string target);
  // Queues bytes on a stream; returns how many it took: fewer than offered
  // when the stream's buffer is full (write the rest after frames went out).
  // 0 for a stream that is unknown or already closed by this side.
  size_t Write(uint32_t stream, std::string_view data);
  // Ends this side of the stream once its buffered bytes are sent.
  void Close(uint32_t stream, std::string reason = "");
  // The application used `bytes` of the stream's received data: they are
  // granted back to the peer (in one window frame per half window).
  void Consumed(uint32_t stream, size_t bytes);

  // The next frame to send: control frames first, then data round-robin
  // among the streams that have bytes and credit. nullopt: nothing to send.
  std::optional<TunnelFrame> NextFrame();
  // Applies a received frame. InvalidArgument for a protocol violation
  // (data past the window granted, an unknown stream, a reused id): the
  // caller should then drop the connection.
  Status OnFrame(const TunnelFrame& f);

  size_t buffered(uint32_t stream) const;  // written, not yet sent
  size_t streams() const { return streams_.size(); }

 private:
  struct Stream {
    std::string out;  // written; bytes before out_pos are sent
    size_t out_pos = 0;
    uint64_t send_credit = 0;   // what the peer still lets us send
    uint64_t recv_allowed = 0;  // what the peer may still send us
    uint64_t consumed_ungranted = 0;
    bool close_queued = false;  // Close was called (the frame follows the data)
    std::string close_reason;
    bool sent_close = false;
    bool got_close = false;
  };
  void QueueControl(TunnelFrame f) { control_.push_back(std::move(f)); }
  void ForgetIfDone(uint32_t id);

  TunnelMuxOptions options_;
  Events events_;
  std::map<uint32_t, Stream> streams_;
  std::deque<TunnelFrame> control_;
  uint32_t next_id_;
  uint32_t last_served_ = 0;  // round-robin position
};

}  // namespace gpupool::proto
