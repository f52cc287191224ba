#include "proto/tunnel_mux.h"

#include <algorithm>
#include <utility>

#include "proto/byte_order.h"

namespace gpupool::proto {
namespace {

bool HasCredit(TunnelFrameKind k) {
  return k == TunnelFrameKind::kOpen || k == TunnelFrameKind::kWindow;
}

}  // namespace

std::string EncodeTunnelFrame(const TunnelFrame& f) {
  std::string out;
  out.reserve(9 + f.payload.size());
  out.push_back(static_cast<char>(f.kind));
  PutU32(out, f.stream);
  if (HasCredit(f.kind)) PutU32(out, f.credit);
  out += f.payload;
  return out;
}

Result<TunnelFrame> DecodeTunnelFrame(std::string_view bytes) {
  if (bytes.size() < 5) {
    return Status::InvalidArgument("tunnel frame: " + std::to_string(bytes.size()) +
                                   " bytes, shorter than its 5-byte header");
  }
  TunnelFrame f;
  uint8_t kind = static_cast<uint8_t>(bytes[0]);
  if (kind < 1 || kind > 4) {
    return Status::InvalidArgument("tunnel frame: unknown kind " + std::to_string(kind));
  }
  f.kind = static_cast<TunnelFrameKind>(kind);
  f.stream = GetU32(bytes.substr(1));
  if (f.stream == 0) return Status::InvalidArgument("tunnel frame: stream 0");
  size_t at = 5;
  if (HasCredit(f.kind)) {
    if (bytes.size() < 9) return Status::InvalidArgument("tunnel frame: its credit is cut short");
    f.credit = GetU32(bytes.substr(5));
    at = 9;
  }
  f.payload.assign(bytes.substr(at));
  return f;
}

TunnelMux::TunnelMux(TunnelMuxOptions options, Events events)
    : options_(options), events_(std::move(events)), next_id_(options.opens_odd ? 1 : 2) {
  options_.max_frame = std::max<uint32_t>(options_.max_frame, 1);
}

uint32_t TunnelMux::Open(std::string target) {
  uint32_t id = next_id_;
  next_id_ += 2;
  Stream& s = streams_[id];
  s.recv_allowed = options_.window;
  QueueControl({TunnelFrameKind::kOpen, id, std::move(target), options_.window});
  return id;
}

size_t TunnelMux::Write(uint32_t stream, std::string_view data) {
  auto it = streams_.find(stream);
  if (it == streams_.end() || it->second.close_queued) return 0;
  Stream& s = it->second;
  size_t pending = s.out.size() - s.out_pos;
  size_t take =
      std::min(data.size(), options_.max_buffered - std::min(pending, options_.max_buffered));
  if (s.out_pos > 0 && s.out_pos * 2 >= s.out.size()) {  // drop what was sent
    s.out.erase(0, s.out_pos);
    s.out_pos = 0;
  }
  s.out.append(data.substr(0, take));
  return take;
}

void TunnelMux::Close(uint32_t stream, std::string reason) {
  auto it = streams_.find(stream);
  if (it == streams_.end() || it->second.close_queued) return;
  it->second.close_queued = true;
  it->second.close_reason = std::move(reason);
}

void TunnelMux::Consumed(uint32_t stream, size_t bytes) {
  auto it = streams_.find(stream);
  if (it == streams_.end() || it->second.got_close) return;
  Stream& s = it->second;
  s.consumed_ungranted += bytes;
  if (s.consumed_ungranted < std::max<uint64_t>(options_.window / 2, 1)) return;
  uint32_t grant = static_cast<uint32_t>(std::min<uint64_t>(s.consumed_ungranted, UINT32_MAX));
  s.consumed_ungranted -= grant;
  s.recv_allowed += grant;
  QueueControl({TunnelFrameKind::kWindow, stream, "", grant});
}

size_t TunnelMux::buffered(uint32_t stream) const {
  auto it = streams_.find(stream);
  return it == streams_.end() ? 0 : it->second.out.size() - it->second.out_pos;
}

std::optional<TunnelFrame> TunnelMux::NextFrame() {
  if (!control_.empty()) {
    TunnelFrame f = std::move(control_.front());
    control_.pop_front();
    return f;
  }
  if (streams_.empty()) return std::nullopt;
  // Round-robin: the first stream after the last one served that can send.
  auto start = streams_.upper_bound(last_served_);
  for (size_t n = 0; n < streams_.size(); ++n, ++start) {
    if (start == streams_.end()) start = streams_.begin();
    auto& [id, s] = *start;
    size_t pending = s.out.size() - s.out_pos;
    if (pending > 0 && s.send_credit > 0) {
      size_t len = std::min<uint64_t>({pending, options_.max_frame, s.send_credit});
      TunnelFrame f{TunnelFrameKind::kData, id, s.out.substr(s.out_pos, len), 0};
      s.out_pos += len;
      s.send_credit -= len;
      if (s.out_pos == s.out.size()) {
        s.out.clear();
        s.out_pos = 0;
      }
      last_served_ = id;
      return f;
    }
    if (pending == 0 && s.close_queued && !s.sent_close) {
      TunnelFrame f{TunnelFrameKind::kClose, id, s.close_reason, 0};
      s.sent_close = true;
      last_served_ = id;
      uint32_t done = id;
      ForgetIfDone(done);
      return f;
    }
  }
  return std::nullopt;
}

Status TunnelMux::OnFrame(const TunnelFrame& f) {
  auto it = streams_.find(f.stream);
  const std::string where = "tunnel stream " + std::to_string(f.stream);
  switch (f.kind) {
    case TunnelFrameKind::kOpen: {
      bool peers_id = (f.stream % 2 == 1) != options_.opens_odd;
      if (!peers_id) return Status::InvalidArgument(where + ": opened with one of our ids");
      if (it != streams_.end()) return Status::InvalidArgument(where + ": opened twice");
      Stream& s = streams_[f.stream];
      s.send_credit = f.credit;
      s.recv_allowed = options_.window;
      QueueControl({TunnelFrameKind::kWindow, f.stream, "", options_.window});
      if (events_.opened) events_.opened(f.stream, f.payload);
      return Status::Ok();
    }
    case TunnelFrameKind::kWindow:
      // A grant for a stream already forgotten is late, not wrong.
      if (it != streams_.end()) it->second.send_credit += f.credit;
      return Status::Ok();
    case TunnelFrameKind::kData: {
      if (it == streams_.end()) return Status::InvalidArgument(where + ": data on no open stream");
      Stream& s = it->second;
      if (s.got_close) return Status::InvalidArgument(where + ": data after its close");
      if (f.payload.size() > s.recv_allowed) {
        return Status::InvalidArgument(where + ": " + std::to_string(f.payload.size()) +
                                       " bytes, past the window of " +
                                       std::to_string(s.recv_allowed));
      }
      s.recv_allowed -= f.payload.size();
      if (events_.data) events_.data(f.stream, f.payload);
      return Status::Ok();
    }
    case TunnelFrameKind::kClose:
      if (it == streams_.end() || it->second.got_close) return Status::Ok();
      it->second.got_close = true;
      if (events_.closed) events_.closed(f.stream, f.payload);
      ForgetIfDone(f.stream);
      return Status::Ok();
  }
  return Status::InvalidArgument(where + ": unknown frame kind");
}

void TunnelMux::ForgetIfDone(uint32_t id) {
  auto it = streams_.find(id);
  if (it != streams_.end() && it->second.sent_close && it->second.got_close) streams_.erase(it);
}

}  // namespace gpupool::proto
