#include "metrics/process_families.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "metrics/families.h"

namespace gpupool::metrics {

namespace {

using prometheus::MetricType;

// The boot time (`btime` of /proc/stat), seconds since the epoch.
Result<int64_t> BootTime() {
  std::ifstream in("/proc/stat");
  std::string key;
  while (in >> key) {
    if (key == "btime") {
      int64_t t = 0;
      if (in >> t) return t;
      break;
    }
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return Status::Internal("/proc/stat has no btime");
}

}  // namespace

Result<ProcessSample> ReadProcessSample() {
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // The command name (field 2) is in parentheses and may hold spaces:
  // fields are counted from the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return Status::Internal("cannot parse /proc/self/stat");
  std::istringstream fields(stat.substr(close + 2));
  // Field 3 (state) is the first here; utime and stime are 14 and 15,
  // starttime 22, vsize 23, rss 24 (pages).
  std::string field;
  double utime = 0, stime = 0, starttime = 0, vsize = 0, rss = 0;
  for (int i = 3; i <= 24 && fields >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
    if (i == 22) starttime = std::stod(field);
    if (i == 23) vsize = std::stod(field);
    if (i == 24) rss = std::stod(field);
  }
  GP_ASSIGN_OR_RETURN(int64_t boot, BootTime());
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  ProcessSample p;
  p.cpu_seconds = (utime + stime) / ticks;
  p.start_time_seconds = static_cast<double>(boot) + starttime / ticks;
  p.virtual_bytes = static_cast<int64_t>(vsize);
  p.resident_bytes = static_cast<int64_t>(rss) * ::sysconf(_SC_PAGESIZE);
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++p.open_fds;
  }
  if (p.open_fds > 0) --p.open_fds;  // the iterator's own descriptor
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) p.max_fds = static_cast<int64_t>(limit.rlim_cur);
  return p;
}

std::string ProcessText(const ProcessSample& p, double now_seconds, std::string_view version) {
  std::string out;
  auto one = [&](const char* name, const char* help, MetricType type, double value) {
    TextFamily(name, help, type).Add({}, value).AppendTo(out);
  };
  one("process_cpu_seconds_total", "CPU time the server used, user and system.",
      MetricType::Counter, p.cpu_seconds);
  one("process_resident_memory_bytes", "The server's resident memory.", MetricType::Gauge,
      static_cast<double>(p.resident_bytes));
  one("process_virtual_memory_bytes", "The server's virtual memory.", MetricType::Gauge,
      static_cast<double>(p.virtual_bytes));
  one("process_open_fds", "File descriptors the server has open.", MetricType::Gauge,
      static_cast<double>(p.open_fds));
  one("process_max_fds", "The server's limit on open file descriptors.", MetricType::Gauge,
      static_cast<double>(p.max_fds));
  one("process_start_time_seconds", "When the server started, seconds since the Unix epoch.",
      MetricType::Gauge, p.start_time_seconds);
  one("gpupool_uptime_seconds", "Seconds since the server started.", MetricType::Gauge,
      std::max(0.0, now_seconds - p.start_time_seconds));
  TextFamily("gpupool_build_info", "The gpupool version serving (always 1).", MetricType::Gauge)
      .Add({{"version", version}}, 1)
      .AppendTo(out);
  return out;
}

}  // namespace gpupool::metrics
