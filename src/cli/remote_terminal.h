// The local terminal around `gpupool exec` and `gpupool shell`: raw mode
// while a remote PTY does the line editing, and the terminal's size.
//
// TerminalGuard saves, at construction, stdin's terminal settings (when it
// is a terminal) and the file status flags of fds 0-2 (the event loop makes
// watched fds non-blocking, and the shell that started us shares them), and
// puts all of it back in Restore() or its destructor, whichever comes
// first. Main thread only.
#pragma once

#include <termios.h>

#include <optional>

namespace gpupool::cli {

class TerminalGuard {
 public:
  TerminalGuard();
  ~TerminalGuard() { Restore(); }
  TerminalGuard(const TerminalGuard&) = delete;
  TerminalGuard& operator=(const TerminalGuard&) = delete;

  // Puts stdin's terminal in raw mode (cfmakeraw): every byte, Ctrl-C and
  // Ctrl-Z included, goes to the remote PTY. False when stdin is no terminal.
  bool MakeRaw();
  // Idempotent.
  void Restore();

 private:
  std::optional<termios> saved_tty_;
  bool raw_ = false;
  int saved_flags_[3] = {-1, -1, -1};
};

struct TerminalSize {
  int rows = 0;
  int cols = 0;
};
// The size of the terminal on stdin, else stdout, else stderr.
std::optional<TerminalSize> CurrentTerminalSize();

}  // namespace gpupool::cli
