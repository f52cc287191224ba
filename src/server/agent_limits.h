// What one agent connection may cost the server, and what an agent may
// claim about its machine.
//
// ChannelBudget bounds the work one agent's WebSocket can cause: every
// message has a size limit, and token buckets limit the JSON messages and
// the binary (tunnel) frames per second. A legitimate agent stays far
// below them (a heartbeat every 5 s, a few task reports, output in
// messages of at most 256 KiB, tunnel data paced by its flow-control
// windows); a broken or hostile one that exceeds them is disconnected with
// the reason, the refusal is audited, and its node may not reconnect for
// `cooldown_ms` (AgentHub). JSON bytes are paced rather than refused: past
// their bucket the hub stops reading the connection until the bucket has
// refilled, so a busy agent is slowed, never cut off.
//
// CheckHelloClaims refuses what no real machine reports: more GPUs than
// `max_gpus`, a GPU with more memory than `max_gpu_memory_mib`, the same
// UUID or index twice, more CPUs or memory than the limits. The server
// cannot verify plausible claims (that a GPU exists): see docs/security.md.
//
// Pure: time is passed in (monotonic milliseconds); no I/O, no locks.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "proto/messages.h"

namespace gpupool::server {

struct ChannelLimits {
  size_t max_text_bytes = 8 << 20;    // one JSON message (a logs chunk is at most ~1.6 MiB)
  size_t max_binary_bytes = 1 << 20;  // one tunnel frame (they carry at most 64 KiB)
  double messages_per_s = 1000;       // JSON messages, sustained ...
  double message_burst = 5000;        // ... and in a burst
  double frames_per_s = 20'000;       // tunnel frames (a busy tunnel sends ~3,500/s)
  double frame_burst = 50'000;
  double text_bytes_per_s = 16 << 20;  // JSON bytes: paced, not refused
  double text_byte_burst = 64 << 20;
  int64_t cooldown_ms = 30'000;  // a node cut off for flooding may not reconnect before
};

// A token bucket: `rate` tokens a second, at most `burst` saved up.
class TokenBucket {
 public:
  TokenBucket(double rate, double burst, int64_t now_ms)
      : rate_(rate), burst_(burst), tokens_(burst), last_ms_(now_ms) {}
  // Takes `n` tokens (the balance may go negative). Returns how many
  // milliseconds until the balance is back to zero: 0 when it did not go
  // below.
  int64_t Take(double n, int64_t now_ms);
  // Whether the balance is below -`slack`.
  bool Overdrawn(double slack) const { return tokens_ < -slack; }

 private:
  void Refill(int64_t now_ms);
  double rate_, burst_, tokens_;
  int64_t last_ms_;
};

class ChannelBudget {
 public:
  ChannelBudget(const ChannelLimits& limits, int64_t now_ms);

  struct Verdict {
    std::string refuse;    // non-empty: close the connection, this is why
    int64_t pause_ms = 0;  // else: stop reading for this long (JSON bytes paced)
  };
  Verdict OnText(size_t bytes, int64_t now_ms);
  Verdict OnBinary(size_t bytes, int64_t now_ms);

 private:
  ChannelLimits limits_;
  TokenBucket messages_, frames_, text_bytes_;
};

struct NodeClaimLimits {
  size_t max_gpus = 64;                           // per node (the largest servers have 16)
  int64_t max_gpu_memory_mib = int64_t{4} << 20;  // 4 TiB per GPU
  int64_t max_cpu_milli = int64_t{16384} * 1000;  // 16,384 CPUs
  int64_t max_memory_mib = int64_t{64} << 20;     // 64 TiB
};

// OK, or InvalidArgument saying which claim is impossible ("gpus[3].uuid:
// GPU-... is listed twice").
Status CheckHelloClaims(const proto::Hello& hello, const NodeClaimLimits& limits);

// Which node each GPU UUID belongs to: a GPU is its first node's until that
// node is forgotten (Reset without it: it left or was revoked), so an agent
// cannot take over another machine's GPUs by naming them, even while that
// machine is offline.
class GpuOwners {
 public:
  // Replaces everything: node name -> its GPUs' UUIDs.
  void Reset(const std::map<std::string, std::vector<std::string>>& by_node);
  // The first GPU of `gpus` that a node other than `node` holds:
  // (its index in `gpus`, the holder); nullopt when none.
  std::optional<std::pair<size_t, std::string>> Conflict(const std::string& node,
                                                         const std::vector<GpuInfo>& gpus) const;
  // `node` now holds exactly `gpus`.
  void Claim(const std::string& node, const std::vector<GpuInfo>& gpus);

 private:
  std::map<std::string, std::string> owner_;              // uuid -> node
  std::map<std::string, std::vector<std::string>> held_;  // node -> uuids
};

}  // namespace gpupool::server
