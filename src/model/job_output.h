// A job's output and its limit: what one line of output costs, how much of
// it is kept, and the marker that says the rest was dropped. Pure and
// deterministic; the shim (agent/output_log.h), which writes a task's
// output.log, and the server (server/job_logs.h), which stores what agents
// ship, run the same OutputBudget over the same lines, so a well-behaved
// agent never sends a line the server then drops, and a hostile one cannot
// make the server keep more than the limit.
//
// The limit counts, per attempt rank, every line of stdout and stderr and
// every event ("pulling image ...") at LogLineCost: its bytes plus
// kLogLineOverheadBytes, the most its record costs besides the text (the
// output.log record "o <ts_ms> <text>\n"; the server's packed line), so
// that neither the agent's output.log nor the server's copy ever holds more
// than the limit plus the event allowance.
//
// Once a line of output would pass the limit, that line and every later
// line of stdout and stderr is dropped, and the marker event
// (OutputLimitMarker) is kept in its place, once. Events still pass after
// that, within kLogEventAllowanceBytes more (what went wrong later, the
// job's end, must still be told), then they are dropped too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace gpupool {

// --max-job-output's default (docs/operator-guide.md).
inline constexpr int64_t kDefaultMaxJobOutputBytes = int64_t{1} << 30;
inline constexpr int64_t kLogLineOverheadBytes = 20;
inline constexpr int64_t kLogEventAllowanceBytes = 64 * 1024;

inline int64_t LogLineCost(std::string_view text) {
  return static_cast<int64_t>(text.size()) + kLogLineOverheadBytes;
}

// "output limit of 1 GiB reached: further output dropped"
std::string OutputLimitMarker(int64_t limit_bytes);
// Whether `text` is such a marker (for any limit).
bool IsOutputLimitMarker(std::string_view text);

// The limit an agent applies: the server's (0 from a server older than the
// limit: the default), lowered by the provider's policy (0: none).
int64_t EffectiveOutputLimit(int64_t server_bytes, int64_t policy_bytes);

// The running count of one attempt rank's output against its limit.
class OutputBudget {
 public:
  enum class Verdict {
    kKeep,        // store the line
    kDrop,        // drop it
    kDropMarked,  // drop it and store the marker in its place (once)
  };

  // `used` and `reached`: what was already kept of this output (the
  // server's stored count after a restart; 0 and false for a new one).
  explicit OutputBudget(int64_t limit_bytes, int64_t used = 0, bool reached = false)
      : limit_(limit_bytes), used_(used), reached_(reached) {}

  // A line of the job's stdout or stderr.
  Verdict Output(std::string_view text);
  // An event of the task's own. A marker (IsOutputLimitMarker) counts as
  // the limit being reached; a second one is dropped.
  Verdict Event(std::string_view text);
  // Counts the marker that replaced a line after kDropMarked.
  void MarkerKept(std::string_view marker) { used_ += LogLineCost(marker); }

  int64_t limit() const { return limit_; }
  int64_t used() const { return used_; }
  bool reached() const { return reached_; }

 private:
  int64_t limit_;
  int64_t used_;
  bool reached_;
};

// Whether `text` is well-formed UTF-8 throughout.
bool IsValidUtf8(std::string_view text);

// `text` with every byte that is not part of well-formed UTF-8 replaced by
// U+FFFD, so that what is stored and shipped as JSON is what was counted.
std::string ValidUtf8(std::string_view text);

// Where to cut `text` to at most `max` bytes without splitting a UTF-8
// sequence: `max` itself, or up to 3 bytes less (never 0 when max >= 4).
size_t Utf8CutPoint(std::string_view text, size_t max);

}  // namespace gpupool
