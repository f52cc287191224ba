#include "agent/task_files.h"

#include <time.h>

#include <charconv>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/files.h"
#include "common/json_reader.h"

namespace gpupool::agent {

std::string EncodeResult(const TaskResult& r) {
  nlohmann::json j{{"exit_code", r.exit_code},
                   {"signal", r.signal},
                   {"reason", r.reason},
                   {"failed", r.failed},
                   {"finished_ms", r.finished_ms}};
  if (r.lost) j["lost"] = true;
  return j.dump();
}

Result<TaskResult> DecodeResult(std::string_view text) {
  GP_ASSIGN_OR_RETURN(auto j, ParseJsonObject(text, "result.json"));
  JsonReader r(j, "result");
  TaskResult out;
  out.exit_code = static_cast<int32_t>(r.Int("exit_code"));
  out.signal = static_cast<int32_t>(r.Int("signal", false));
  out.reason = r.Str("reason", false);
  out.failed = r.Bool("failed", false);
  out.finished_ms = r.Int("finished_ms", false);
  out.lost = r.Bool("lost", false);
  GP_RETURN_IF_ERROR(r.Finish(false));
  return out;
}

std::string EncodePids(const ShimPids& p) {
  return std::to_string(p.shim_pid) + " " + std::to_string(p.shim_start_time) + " " +
         std::to_string(p.job_pid);
}

Result<ShimPids> DecodePids(std::string_view text) {
  ShimPids p;
  std::istringstream in{std::string(text)};
  if (!(in >> p.shim_pid >> p.shim_start_time >> p.job_pid) || p.shim_pid <= 0 || p.job_pid <= 0) {
    return Status::InvalidArgument("bad pids record \"" + std::string(text) + "\"");
  }
  return p;
}

std::string EncodeLeaseFile(const AttemptLease& l) {
  return std::to_string(l.deadline_ms) + " " + std::to_string(l.lease_ms) + "\n";
}

Result<AttemptLease> DecodeLeaseFile(std::string_view text) {
  AttemptLease l;
  std::istringstream in{std::string(text)};
  if (!(in >> l.deadline_ms >> l.lease_ms) || l.deadline_ms < 0 || l.lease_ms <= 0) {
    return Status::InvalidArgument("bad gang lease \"" + std::string(text) + "\"");
  }
  return l;
}

int64_t BootTimeMs() {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

std::string EncodeRecord(char kind, int64_t ts_ms, std::string_view text) {
  std::string out;
  out.reserve(text.size() + 24);
  out += kind;
  out += ' ';
  out += std::to_string(ts_ms);
  out += ' ';
  out.append(text.data(), text.size());
  out += '\n';
  return out;
}

std::vector<OutputRecord> ParseRecords(std::string_view data, int64_t base_offset,
                                       size_t* consumed) {
  std::vector<OutputRecord> out;
  size_t pos = 0;
  while (pos < data.size()) {
    size_t nl = data.find('\n', pos);
    if (nl == std::string_view::npos) break;
    std::string_view line = data.substr(pos, nl - pos);
    OutputRecord rec;
    rec.offset = base_offset + static_cast<int64_t>(pos);
    rec.stream = "stdout";
    bool parsed = false;
    bool known_kind = line.size() >= 4 && line[1] == ' ' &&
                      (line[0] == 'o' || line[0] == 'e' || line[0] == 'v' || line[0] == 'p' ||
                       line[0] == 'x' || line[0] == 'r');
    if (known_kind) {
      size_t sp = line.find(' ', 2);
      if (sp != std::string_view::npos) {
        int64_t ts = 0;
        auto [p, ec] = std::from_chars(line.data() + 2, line.data() + sp, ts);
        if (ec == std::errc() && p == line.data() + sp) {
          rec.kind = line[0];
          rec.stream = line[0] == 'e' ? "stderr" : line[0] == 'v' ? "event" : "stdout";
          rec.ts_ms = ts;
          rec.text = std::string(line.substr(sp + 1));
          parsed = true;
        }
      }
    }
    if (!parsed) rec.text = std::string(line);
    out.push_back(std::move(rec));
    pos = nl + 1;
  }
  *consumed = pos;
  return out;
}

std::optional<uint64_t> ProcessStartTime(int pid) {
  if (pid <= 0) return std::nullopt;
  // Read with read(2), never a stream: a process that ends while its stat
  // is read fails the read (ESRCH), which is "gone", not an exception.
  auto read = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!read.ok()) return std::nullopt;
  const std::string& stat = *read;
  // The command name (field 2) may contain spaces; fields resume after ')'.
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  // After ')' come fields 3..; the start time is field 22.
  char state = 0;
  rest >> state;
  if (state == 'Z' || state == 'X') return std::nullopt;  // exited, not yet reaped
  for (int i = 4; i <= 22; ++i) {
    if (!(rest >> field)) return std::nullopt;
  }
  uint64_t start = 0;
  auto [p, ec] = std::from_chars(field.data(), field.data() + field.size(), start);
  if (ec != std::errc()) return std::nullopt;
  return start;
}

}  // namespace gpupool::agent
