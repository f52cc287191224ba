#include "proto/channel.h"

namespace gpupool::proto {

int64_t Outbox::Push(std::string type, std::string body) {
  Envelope e;
  e.seq = next_seq_++;
  e.type = std::move(type);
  e.body = std::move(body);
  bytes_ += e.body.size();
  pending_.push_back(std::move(e));
  return pending_.back().seq;
}

void Outbox::Ack(int64_t upto) {
  while (!pending_.empty() && pending_.front().seq <= upto) {
    bytes_ -= pending_.front().body.size();
    pending_.pop_front();
  }
}

std::vector<Envelope> Outbox::After(int64_t after) const {
  std::vector<Envelope> out;
  for (const Envelope& e : pending_) {
    if (e.seq > after) out.push_back(e);
  }
  return out;
}

}  // namespace gpupool::proto
