#include "server/tunnel_relay.h"

namespace gpupool::server {

namespace {
// Bytes from the agent are granted back while the user's connection has
// less than this queued.
constexpr size_t kUserQueueLimit = 256 * 1024;
}  // namespace

TunnelRelay::~TunnelRelay() {
  if (stream_) stream_->Close();
}

Status TunnelRelay::Start(AgentHub& hub, const std::string& node_id,
                          const proto::TunnelTarget& target) {
  std::weak_ptr<TunnelRelay> weak = weak_from_this();
  TunnelStream::Events events;
  events.data = [weak](std::string_view bytes) {
    if (auto self = weak.lock()) self->FromAgent(bytes);
  };
  events.writable = [weak] {
    if (auto self = weak.lock()) self->StreamWritable();
  };
  events.closed = [weak](const std::string& reason) {
    if (auto self = weak.lock()) self->StreamClosed(reason);
  };
  GP_ASSIGN_OR_RETURN(stream_, hub.OpenTunnel(node_id, target, std::move(events)));
  Flush();
  return Status::Ok();
}

void TunnelRelay::FromUser(std::string_view bytes) {
  if (stream_closed_ || bytes.empty()) return;
  on_bytes_(bytes.size());
  if (pending_.empty() && stream_) {
    // The usual case: the stream takes it all, with no copy kept here.
    bytes.remove_prefix(stream_->Write(bytes));
  }
  pending_.append(bytes);
  Flush();
}

void TunnelRelay::Flush() {
  if (!stream_ || stream_closed_) return;
  if (!pending_.empty()) {
    size_t took = stream_->Write(pending_);
    pending_.erase(0, took);
  }
  bool full = !pending_.empty();
  if (user_closed_) {
    // The user's last bytes go before our side's close.
    if (!full) stream_->Close();
  } else if (full != user_paused_) {
    user_paused_ = full;
    user_.pause_reading(full);
  }
}

void TunnelRelay::StreamWritable() { Flush(); }

void TunnelRelay::FromAgent(std::string_view bytes) {
  if (user_closed_) return stream_->Consumed(bytes.size());
  on_bytes_(bytes.size());
  bytes_to_user_ += bytes.size();
  user_.send(std::string(bytes));
  if (user_.queued() < kUserQueueLimit) {
    stream_->Consumed(bytes.size() + ungranted_);
    ungranted_ = 0;
  } else {
    ungranted_ += bytes.size();
  }
}

void TunnelRelay::UserDrained() {
  if (ungranted_ == 0 || !stream_ || stream_closed_) return;
  if (user_.queued() < kUserQueueLimit) {
    stream_->Consumed(ungranted_);
    ungranted_ = 0;
  }
}

void TunnelRelay::UserClosed() {
  if (user_closed_) return;
  user_closed_ = true;
  Flush();
}

void TunnelRelay::StreamClosed(const std::string& reason) {
  if (stream_closed_) return;
  stream_closed_ = true;
  if (!user_closed_) {
    user_closed_ = true;
    user_.close(reason);
  }
}

}  // namespace gpupool::server
