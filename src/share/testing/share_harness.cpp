// share_harness: plays the agent's part of the compute share for tasks on
// one fake GPU (tests/fake_cuda), so that the arbiter, the share files and
// libgpushare.so's gate are tested together in real processes:
//
//   share_harness --probe CUDA_PROBE --preload LIBGPUSHARE --dir DIR
//                 --task NAME:SHARE_MILLI:MODE:START_MS:SECONDS[:SYNC_EVERY] [--task ...]
//                 [--tick-ms 5] [--no-gate] [--trace FILE]
//
// MODE is wc (work-conserving) or strict. For each task it writes DIR/NAME.want,
// NAME.grant and NAME.limits (as the agent would) and runs `cuda_probe spin
// SECONDS T` under LD_PRELOAD, where T is START_MS after a common start
// (300 ms from now, time for every probe to load). It runs the arbiter
// every tick (and at each Decision::next_change_ns) until every probe has
// exited, then prints a line per task,
//
//   task NAME share S mode M exit E first_us F launches L wall_us W busy B
//
// (the probe's figures: see src/gpushare/testing/cuda_probe.c), and
// "ticks N late_max_us L" (its own ticks, and the latest one). --no-gate
// leaves want and grant out of the limits: the fake GPU's first come, first
// served, for comparison. Exit status 0, or 1 with a message.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "share/arbiter.h"
#include "share/share_files.h"

extern char** environ;

namespace {

using gpupool::share::Arbiter;
using gpupool::share::Decision;
using gpupool::share::MonotonicNs;
using gpupool::share::TaskDemand;
using gpupool::share::TaskShareFiles;

constexpr const char* kUuid = "GPU-5ba7e000-1111-2222-3333-444455556666";
constexpr int64_t kLeadNs = 300'000'000;

struct TaskSpec {
  std::string name, mode;
  uint32_t share = 1000;
  int64_t start_ms = 0;
  double seconds = 1;
  unsigned sync_every = 0;  // the probe synchronizes itself after every N launches
};

struct Options {
  std::string probe, preload, dir;
  std::vector<TaskSpec> tasks;
  int64_t tick_ns = 5'000'000;
  bool gate = true;
  std::string trace;  // each change of a grant: time, task, state, until, last active
};

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "share_harness: %s\n", what.c_str());
  std::exit(1);
}

TaskSpec ParseTask(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string p; std::getline(in, p, ':');) parts.push_back(p);
  if (parts.size() < 5 || parts.size() > 6 || (parts[2] != "wc" && parts[2] != "strict")) {
    Fail("--task NAME:SHARE_MILLI:wc|strict:START_MS:SECONDS[:SYNC_EVERY], not " + text);
  }
  return {parts[0],
          parts[2],
          static_cast<uint32_t>(std::stoul(parts[1])),
          std::stoll(parts[3]),
          std::stod(parts[4]),
          parts.size() == 6 ? static_cast<unsigned>(std::stoul(parts[5])) : 0};
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Fail(a + " needs a value");
      return argv[++i];
    };
    if (a == "--probe") {
      o.probe = value();
    } else if (a == "--preload") {
      o.preload = value();
    } else if (a == "--dir") {
      o.dir = value();
    } else if (a == "--task") {
      o.tasks.push_back(ParseTask(value()));
    } else if (a == "--tick-ms") {
      o.tick_ns = std::stoll(value()) * 1'000'000;
    } else if (a == "--trace") {
      o.trace = value();
    } else if (a == "--no-gate") {
      o.gate = false;
    } else {
      Fail("unknown argument " + a);
    }
  }
  if (o.probe.empty() || o.preload.empty() || o.dir.empty() || o.tasks.empty()) {
    Fail("usage: share_harness --probe P --preload LIB --dir DIR --task N:S:M:START:SEC ...");
  }
  return o;
}

pid_t Spawn(const std::vector<std::string>& args, const std::vector<std::string>& env,
            const std::string& out, const std::string& err) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) Fail("cannot start " + args[0]);
  return pid;
}

std::map<std::string, std::string> ReadFigures(const std::string& path) {
  std::map<std::string, std::string> figures;
  std::ifstream in(path);
  for (std::string key, value; in >> key >> value;) figures[key] = value;
  return figures;
}

void SleepUntil(int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o = ParseArgs(argc, argv);
  namespace fs = std::filesystem;
  fs::create_directories(o.dir + "/state");
  std::ofstream(o.dir + "/gpus.json")
      << R"J({"devices": [{"name": "A100 (simulated)", "memory_total_mib": 81920, "uuid": ")J"
      << kUuid << R"J("}]})J";

  auto arbiter = Arbiter::Create({});
  if (!arbiter.ok()) Fail(arbiter.status().ToString());
  std::vector<TaskShareFiles> files;
  std::vector<TaskDemand> demands;
  std::vector<pid_t> pids;
  std::vector<int> exits;
  const int64_t base = MonotonicNs() + kLeadNs;
  int64_t deadline = base;
  for (const TaskSpec& t : o.tasks) {
    std::string p = o.dir + "/" + t.name;
    auto f = TaskShareFiles::Create(p + ".want", p + ".grant");
    if (!f.ok()) Fail(f.status().ToString());
    files.push_back(std::move(f).value());
    demands.push_back({t.name, t.share, t.mode == "strict", 0});
    std::ofstream limits(p + ".limits");
    limits << "gpushare 1\nshare_milli " << t.share << "\nmode "
           << (t.mode == "strict" ? "strict" : "work-conserving") << "\n";
    if (o.gate) limits << "want " << p << ".want\ngrant " << p << ".grant\n";
    limits.close();
    int64_t start = base + t.start_ms * 1'000'000;
    deadline = std::max(deadline, start + static_cast<int64_t>(t.seconds * 1e9));
    std::vector<std::string> env = {
        "FAKE_NVML_CONFIG=" + o.dir + "/gpus.json", "FAKE_CUDA_STATE_DIR=" + o.dir + "/state",
        "GPUSHARE_LIMITS=" + p + ".limits", "LD_PRELOAD=" + o.preload, "PATH=/usr/bin:/bin"};
    // In the sanitizer build the probe is instrumented and the library is
    // not; preloaded ahead of the sanitizer's runtime, only its link-order
    // check minds.
    const char* asan = std::getenv("ASAN_OPTIONS");
    env.push_back(std::string("ASAN_OPTIONS=verify_asan_link_order=0") +
                  (asan != nullptr && *asan != '\0' ? std::string(":") + asan : ""));
    if (const char* ubsan = std::getenv("UBSAN_OPTIONS")) {
      env.push_back(std::string("UBSAN_OPTIONS=") + ubsan);
    }
    pids.push_back(Spawn({o.probe, "spin", std::to_string(t.seconds), std::to_string(start),
                          std::to_string(t.sync_every)},
                         env, p + ".out", p + ".err"));
    exits.push_back(-1);
  }

  // The agent's loop: read the wants, decide, write the grants.
  deadline += 30'000'000'000;  // far past the probes' own end
  int running = static_cast<int>(pids.size());
  long ticks = 0;
  int64_t late_max = 0;
  std::ofstream trace;
  if (!o.trace.empty()) trace.open(o.trace);
  std::vector<gpupool::share::Grant> last(files.size());
  while (running > 0) {
    int64_t now = MonotonicNs();
    if (now > deadline) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
      Fail("the probes did not end");
    }
    for (size_t i = 0; i < files.size(); ++i)
      demands[i].last_active_ns = files[i].ReadLastActiveNs();
    Decision d = arbiter->Tick(demands, now);
    for (size_t i = 0; i < files.size(); ++i) {
      files[i].WriteGrant(d.grants[i], now);
      if (trace.is_open() && (ticks == 0 || !(d.grants[i] == last[i]))) {
        trace << now << ' ' << o.tasks[i].name << ' ' << static_cast<int>(d.grants[i].state) << ' '
              << d.grants[i].until_ns << ' ' << demands[i].last_active_ns << '\n';
      }
      last[i] = d.grants[i];
    }
    ++ticks;
    for (size_t i = 0; i < pids.size(); ++i) {
      int st = 0;
      if (exits[i] < 0 && ::waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        exits[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        --running;
      }
    }
    int64_t next = std::min(now + o.tick_ns, d.next_change_ns);
    SleepUntil(next);
    late_max = std::max(late_max, MonotonicNs() - next);
  }

  for (size_t i = 0; i < o.tasks.size(); ++i) {
    const TaskSpec& t = o.tasks[i];
    auto f = ReadFigures(o.dir + "/" + t.name + ".out");
    std::printf("task %s share %u mode %s exit %d first_us %s launches %s wall_us %s busy %s\n",
                t.name.c_str(), t.share, t.mode.c_str(), exits[i], f["first_us"].c_str(),
                f["launches"].c_str(), f["wall_us"].c_str(), f["busy"].c_str());
  }
  std::printf("ticks %ld late_max_us %lld\n", ticks, static_cast<long long>(late_max / 1000));
  return 0;
}
