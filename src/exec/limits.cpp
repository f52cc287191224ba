#include "exec/limits.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "common/units.h"

namespace gpupool::exec {
namespace {

struct SignalInfo {
  int number;
  const char* name;
  const char* what;  // nullptr: the name says it all
};

// The standard signals of Linux on x86-64 and arm64.
constexpr SignalInfo kSignals[] = {
    {SIGHUP, "SIGHUP", "hangup"},
    {SIGINT, "SIGINT", "interrupt"},
    {SIGQUIT, "SIGQUIT", "quit"},
    {SIGILL, "SIGILL", "illegal instruction"},
    {SIGTRAP, "SIGTRAP", "trace or breakpoint trap"},
    {SIGABRT, "SIGABRT", "aborted"},
    {SIGBUS, "SIGBUS", "bus error"},
    {SIGFPE, "SIGFPE", "arithmetic exception"},
    {SIGKILL, "SIGKILL", nullptr},
    {SIGUSR1, "SIGUSR1", nullptr},
    {SIGSEGV, "SIGSEGV", "segmentation fault"},
    {SIGUSR2, "SIGUSR2", nullptr},
    {SIGPIPE, "SIGPIPE", "broken pipe"},
    {SIGALRM, "SIGALRM", "alarm clock"},
    {SIGTERM, "SIGTERM", "terminated"},
    {SIGSTKFLT, "SIGSTKFLT", "stack fault"},
    {SIGCHLD, "SIGCHLD", nullptr},
    {SIGCONT, "SIGCONT", nullptr},
    {SIGSTOP, "SIGSTOP", nullptr},
    {SIGTSTP, "SIGTSTP", nullptr},
    {SIGTTIN, "SIGTTIN", nullptr},
    {SIGTTOU, "SIGTTOU", nullptr},
    {SIGURG, "SIGURG", nullptr},
    {SIGXCPU, "SIGXCPU", "CPU time limit exceeded"},
    {SIGXFSZ, "SIGXFSZ", "file size limit exceeded"},
    {SIGVTALRM, "SIGVTALRM", "virtual timer expired"},
    {SIGPROF, "SIGPROF", "profiling timer expired"},
    {SIGWINCH, "SIGWINCH", nullptr},
    {SIGIO, "SIGIO", nullptr},
    {SIGPWR, "SIGPWR", "power failure"},
    {SIGSYS, "SIGSYS", "bad system call"},
};

std::string DescribeSignal(int sig) {
  for (const auto& s : kSignals) {
    if (s.number == sig) {
      return s.what == nullptr ? std::string(s.name) : std::string(s.name) + " (" + s.what + ")";
    }
  }
  if (sig >= SIGRTMIN && sig <= SIGRTMAX) return "SIGRTMIN+" + std::to_string(sig - SIGRTMIN);
  return std::to_string(sig);
}

}  // namespace

std::vector<Rlimit> RlimitsFor(const Limits& limits, bool cgroup) {
  std::vector<Rlimit> out{{RLIMIT_CORE, 0}};
  if (limits.disk_bytes > 0) {
    out.push_back({RLIMIT_FSIZE, static_cast<uint64_t>(limits.disk_bytes)});
  }
  if (!cgroup && limits.pids > 0) out.push_back({RLIMIT_NPROC, static_cast<uint64_t>(limits.pids)});
  return out;
}

bool ApplyRlimits(const std::vector<Rlimit>& rlimits) noexcept {
  for (const Rlimit& r : rlimits) {
    struct rlimit value {
      static_cast<rlim_t>(r.value), static_cast<rlim_t>(r.value)
    };
    if (::setrlimit(static_cast<__rlimit_resource_t>(r.resource), &value) != 0) return false;
  }
  return true;
}

Limits TaskLimits(const Limits& requested, const Limits& provider,
                  std::vector<std::string>* notes) {
  Limits l = provider;
  auto pick = [&](int64_t asked, int64_t& limit, const char* what, auto format) {
    if (asked <= 0) return;
    if (limit > 0 && asked > limit) {
      if (notes != nullptr) {
        notes->push_back("asked for " + format(asked) + " of " + what +
                         "; this machine lends at most " + format(limit));
      }
      return;
    }
    limit = asked;
  };
  pick(requested.memory_bytes, l.memory_bytes, "memory", FormatBytes);
  pick(requested.cpu_milli, l.cpu_milli, "CPU",
       [](int64_t m) { return FormatMilli(m) + " cores"; });
  pick(requested.disk_bytes, l.disk_bytes, "disk", FormatBytes);
  return l;
}

std::string MemoryLimitReason(int64_t limit_bytes) {
  return "exceeded its memory limit of " + FormatBytes(limit_bytes);
}

std::string DiskLimitReason(int64_t limit_bytes) {
  return "exceeded its disk limit of " + FormatBytes(limit_bytes) + " (work directory)";
}

std::string PidsLimitNote(int64_t pids) {
  return "hit its limit of " + std::to_string(pids) + (pids == 1 ? " process" : " processes");
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    std::string out = "killed by signal " + DescribeSignal(WTERMSIG(wait_status));
    if (WCOREDUMP(wait_status)) out += ", core dumped";
    return out;
  }
  if (WIFSTOPPED(wait_status)) return "stopped by signal " + DescribeSignal(WSTOPSIG(wait_status));
  return "";
}

std::string DescribeLimitsMode(const Result<CgroupTree>& tree, int64_t memory_poll_ms) {
  if (tree.ok()) {
    return "limits: cgroup v2 at " + tree->path() +
           (tree->has_cpu() ? " (memory, pids, cpu)" : " (memory, pids)");
  }
  return "limits: rlimits (no usable cgroup v2: " + tree.status().message() +
         "); memory watched every " + std::to_string(memory_poll_ms) + " ms";
}

}  // namespace gpupool::exec
