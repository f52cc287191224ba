// Sequencing for the agent channel, kept free of sockets so it can be tested
// alone. See proto/messages.h for the protocol.
//
// Outbox: the sending side's unacked reliable messages, in memory (the
// agent's; the server's outbox is a store table so it survives restarts).
// InboundSequence: the receiving side's "applied up to" counter, which tells
// whether an arriving seq is new, a duplicate, or leaves a gap.
// Not thread-safe; owned by one event loop.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "proto/messages.h"

namespace gpupool::proto {

class Outbox {
 public:
  // Queues a reliable message and returns its seq (1, 2, ...).
  int64_t Push(std::string type, std::string body);
  // Forgets messages with seq <= upto.
  void Ack(int64_t upto);
  // Unacked messages with seq > after, oldest first (to resend after a
  // reconnect, `after` is the peer's last applied seq).
  std::vector<Envelope> After(int64_t after) const;
  size_t size() const { return pending_.size(); }
  size_t bytes() const { return bytes_; }
  int64_t last_seq() const { return next_seq_ - 1; }

 private:
  std::deque<Envelope> pending_;
  int64_t next_seq_ = 1;
  size_t bytes_ = 0;
};

class InboundSequence {
 public:
  enum class Verdict { kApply, kDuplicate, kGap };
  explicit InboundSequence(int64_t last_applied = 0) : last_(last_applied) {}
  Verdict Check(int64_t seq) const {
    if (seq <= last_) return Verdict::kDuplicate;
    return seq == last_ + 1 ? Verdict::kApply : Verdict::kGap;
  }
  void MarkApplied(int64_t seq) { last_ = seq; }
  int64_t last_applied() const { return last_; }

 private:
  int64_t last_;
};

}  // namespace gpupool::proto
