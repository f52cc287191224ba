// TunnelTarget: what a tunnel stream reaches, as the server writes it in the
// stream's open frame (proto/tunnel_mux.h) and the agent reads it.
//
//   {"attempt":"42.1","kind":"tcp","port":8888}
//   {"attempt":"42.1","kind":"jupyter"}
//   {"attempt":"42.1","kind":"exec","argv":["bash"],"tty":true,
//    "rows":24,"cols":80,"term":"xterm-256color"}
//
// tcp: 127.0.0.1:port in the task's network namespace; jupyter: the task's
// notebook server (its UNIX socket); exec: a command run inside the task,
// whose bytes follow proto/exec_stream.h. The decoder is strict (unknown
// fields and out-of-range values are errors naming the field), since the
// text crosses the network. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::proto {

// Limits on an exec target's command line, far above any interactive use.
inline constexpr size_t kMaxExecArgs = 1024;
inline constexpr size_t kMaxExecArgvBytes = 64 * 1024;  // all arguments together
inline constexpr int kMaxTerminalSize = 10'000;         // rows and cols

struct TunnelTarget {
  enum class Kind { kTcp, kJupyter, kExec };
  std::string attempt_id;  // "42.1": the task the stream belongs to
  Kind kind = Kind::kTcp;
  int port = 0;  // tcp: 1..65535
  // exec: the command (non-empty); with `tty` it runs on a terminal of
  // rows x cols (0: the terminal's default) whose TERM is `term`.
  std::vector<std::string> argv;
  bool tty = false;
  int rows = 0;
  int cols = 0;
  std::string term;
  friend bool operator==(const TunnelTarget&, const TunnelTarget&) = default;
};

std::string_view TunnelTargetKindName(TunnelTarget::Kind kind);  // "tcp", "jupyter", "exec"

// Writes only the fields of the target's kind.
std::string EncodeTunnelTarget(const TunnelTarget& t);
// InvalidArgument naming the field ("tunnel target.port: must be from 1 to
// 65535, got 0"), for malformed JSON, an unknown kind, fields of another
// kind, or values out of range.
Result<TunnelTarget> DecodeTunnelTarget(std::string_view text);

}  // namespace gpupool::proto
