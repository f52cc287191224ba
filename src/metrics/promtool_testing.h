// For tests: Prometheus' own checker on an exposition. `promtool check
// metrics` (Debian's `prometheus` package, installed by scripts/setup.sh)
// reads the text on stdin and exits 0, printing nothing, when it parses and
// follows Prometheus' naming conventions (base units, _total on counters).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace gpupool::metrics {

struct PromtoolRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

inline PromtoolRun PromtoolCheckMetrics(const std::string& text) {
  char path[] = "/tmp/promtool_input_XXXXXX";
  PromtoolRun run;
  int fd = ::mkstemp(path);
  if (fd < 0) return run;
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  const std::string command = std::string("promtool check metrics < ") + path + " 2>&1";
  if (FILE* out = ::popen(command.c_str(), "r")) {
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, out)) > 0) run.output.append(buf, n);
    const int status = ::pclose(out);
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  ::unlink(path);
  return run;
}

}  // namespace gpupool::metrics
