#include "cli/remote_terminal.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

namespace gpupool::cli {

TerminalGuard::TerminalGuard() {
  for (int fd = 0; fd < 3; ++fd) saved_flags_[fd] = ::fcntl(fd, F_GETFL);
  termios t{};
  if (::isatty(STDIN_FILENO) && ::tcgetattr(STDIN_FILENO, &t) == 0) saved_tty_ = t;
}

bool TerminalGuard::MakeRaw() {
  if (!saved_tty_) return false;
  termios raw = *saved_tty_;
  ::cfmakeraw(&raw);
  if (::tcsetattr(STDIN_FILENO, TCSADRAIN, &raw) != 0) return false;
  raw_ = true;
  return true;
}

void TerminalGuard::Restore() {
  if (raw_) {
    // TCSADRAIN: the remote's last output reaches the screen in raw mode.
    ::tcsetattr(STDIN_FILENO, TCSADRAIN, &*saved_tty_);
    raw_ = false;
  }
  for (int fd = 0; fd < 3; ++fd) {
    if (saved_flags_[fd] >= 0 && ::fcntl(fd, F_GETFL) != saved_flags_[fd])
      ::fcntl(fd, F_SETFL, saved_flags_[fd]);
  }
}

std::optional<TerminalSize> CurrentTerminalSize() {
  for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
    winsize ws{};
    if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0)
      return TerminalSize{ws.ws_row, ws.ws_col};
  }
  return std::nullopt;
}

}  // namespace gpupool::cli
