#include "agent/tunnel_endpoint.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "agent/task_exec.h"
#include "common/log.h"
#include "common/safe_fs.h"
#include "proto/exec_stream.h"
#include "proto/tunnel_target.h"

namespace gpupool::agent {

namespace {

using proto::ExecFrameType;
using proto::TunnelTarget;

// A descriptor is read while its stream has fewer unsent bytes than this:
// a few data frames, enough to keep the channel busy without queueing more.
constexpr size_t kReadAhead = 256 * 1024;
constexpr size_t kReadChunk = 64 * 1024;  // one data frame (TunnelMuxOptions::max_frame)
// After an exec'd command exited, how long its output may still drain
// (a background process can hold a terminal open forever).
constexpr int64_t kDrainMs = 500;
// How often a command without a pidfd is checked for its exit.
constexpr int64_t kExitPollMs = 50;
// A command whose stream is dropped gets SIGHUP, then SIGKILL this much later.
constexpr int64_t kHangupGraceMs = 2000;
// How long a command killed by SIGKILL waits for news of its task's end.
constexpr int64_t kTaskEndWaitMs = 1000;

constexpr const char* kNotRunning = "the session is not running on this node";

std::string Errno(int err) { return std::strerror(err); }

}  // namespace

struct TunnelEndpoint::Stream {
  uint32_t id = 0;
  std::string attempt;
  TunnelTarget::Kind kind = TunnelTarget::Kind::kTcp;
  int port = 0;
  // tcp and jupyter: the socket; exec: the terminal or the stdin pipe.
  int write_fd = -1;
  // Descriptors read into the stream, with the exec frame type they carry
  // (kStdout for a socket's plain bytes).
  struct Source {
    int fd = -1;
    ExecFrameType type = ExecFrameType::kStdout;
    bool eof = false;
    bool paused = false;  // not watched: the stream has enough unsent bytes
  };
  std::vector<Source> sources;
  bool connecting = false;
  std::string to_fd;  // received, not yet written to write_fd
  bool write_watched = false;
  bool shut_write = false;  // no more bytes go to write_fd (shut down or closed)
  bool remote_closed = false;
  bool local_closed = false;  // mux.Close was called
  // exec
  bool exec = false;
  bool tty = false;
  ExecProcess proc;
  proto::ExecFrameReader reader;
  bool stdin_eof = false;  // the client sent kStdinEof: close after to_fd
  std::optional<int> exit_code;
  int pidfd = -1;
  net::EventLoop::TimerId timer = 0;
  bool draining = false;
  bool waited_for_task = false;

  bool socket() const { return !exec; }
};

TunnelEndpoint::TunnelEndpoint(net::EventLoop& loop, const TaskManager& tasks, Options options)
    : loop_(loop), tasks_(tasks), options_(std::move(options)) {
  options_.mux.opens_odd = false;
  mux_ = MakeMux();
}

TunnelEndpoint::~TunnelEndpoint() {
  *alive_ = false;
  Reset();
}

std::unique_ptr<proto::TunnelMux> TunnelEndpoint::MakeMux() {
  proto::TunnelMux::Events e;
  e.opened = [this](uint32_t id, const std::string& target) { Opened(id, target); };
  e.data = [this](uint32_t id, std::string_view data) { Data(id, data); };
  e.closed = [this](uint32_t id, const std::string& reason) { RemoteClosed(id, reason); };
  return std::make_unique<proto::TunnelMux>(options_.mux, std::move(e));
}

Status TunnelEndpoint::OnMessage(std::string_view bytes) {
  GP_ASSIGN_OR_RETURN(proto::TunnelFrame f, proto::DecodeTunnelFrame(bytes));
  Status s = mux_->OnFrame(f);
  Wake();
  return s;
}

std::optional<std::string> TunnelEndpoint::NextFrame() {
  // Streams whose reading paused for back-pressure resume once their
  // unsent bytes went out (never from inside a read callback: see Wake).
  for (auto& [id, s] : streams_) {
    if (mux_->buffered(id) >= kReadAhead) continue;
    for (Stream::Source& src : s->sources) {
      if (src.paused && !src.eof) {
        src.paused = false;
        WatchRead(*s, src.fd);
      }
    }
  }
  auto f = mux_->NextFrame();
  if (!f) return std::nullopt;
  return proto::EncodeTunnelFrame(*f);
}

void TunnelEndpoint::Wake() {
  // Posted, so that the agent's pull (NextFrame, which re-arms reads) never
  // runs inside a watch callback whose return value would undo it.
  if (!options_.wake || wake_posted_) return;
  wake_posted_ = true;
  Post([this] {
    wake_posted_ = false;
    options_.wake();
  });
}

void TunnelEndpoint::Post(std::function<void()> fn) {
  std::weak_ptr<bool> alive = alive_;
  loop_.Post([alive, fn = std::move(fn)] {
    if (auto a = alive.lock(); a && *a) fn();
  });
}

std::string TunnelEndpoint::EndReason(const TaskState& t) {
  if (!t.vacate_reason.empty())
    return "session ended: the provider reclaimed the GPU (" + t.vacate_reason + ")";
  if (t.result) {
    if (!t.result->reason.empty()) return "session ended: " + t.result->reason;
    return "session ended: exited with code " + std::to_string(t.result->exit_code);
  }
  if (t.shim_gone) return "session ended: the task was lost on this node";
  // Its processes are gone and the shim's result, which says the same, is
  // still to come.
  if (!t.stop_requested.empty()) return "session ended: stopped: " + t.stop_requested;
  return "session ended: its processes exited";
}

void TunnelEndpoint::Opened(uint32_t id, const std::string& text) {
  auto target = proto::DecodeTunnelTarget(text);
  if (!target.ok()) return Refuse(id, target.status().message());
  auto it = tasks_.tasks().find(target->attempt_id);
  if (it == tasks_.tasks().end() || tasks_.Ended(it->second) || !it->second.started ||
      it->second.job_exited) {
    return Refuse(id, kNotRunning);
  }
  const TaskState& t = it->second;
  auto s = std::make_unique<Stream>();
  s->id = id;
  s->attempt = target->attempt_id;
  s->kind = target->kind;
  s->port = target->port;
  Stream& ref = *s;
  streams_[id] = std::move(s);
  switch (target->kind) {
    case TunnelTarget::Kind::kTcp:
      return StartTcp(ref, target->port);
    case TunnelTarget::Kind::kJupyter:
      return StartJupyter(ref, t);
    case TunnelTarget::Kind::kExec: {
      ref.exec = true;
      ref.tty = target->tty;
      ExecTask task{t.attempt_id, t.shim_pid, t.runs_as,
                    t.runs_as == "podman" ? options_.podman : options_.docker};
      ExecCommand cmd{target->argv, target->tty, target->rows, target->cols, target->term};
      auto proc = StartTaskExec(task, cmd);
      if (!proc.ok()) {
        if (proc.status().code() == StatusCode::kFailedPrecondition)
          return Finish(ref, kNotRunning);
        mux_->Write(id, proto::EncodeExecFrame(ExecFrameType::kError,
                                               proc.status().message().substr(0, 4096)));
        mux_->Write(id, proto::EncodeExecExit(ExecFailureCode(proc.status())));
        return Finish(ref, "");
      }
      ref.proc = *proc;
      return StartExec(ref);
    }
  }
}

void TunnelEndpoint::Refuse(uint32_t id, const std::string& reason) {
  mux_->Close(id, reason);
  Wake();
}

void TunnelEndpoint::StartTcp(Stream& s, int port) {
  const TaskState& t = tasks_.tasks().at(s.attempt);
  auto job = FindJobProcess(t.shim_pid);
  if (!job.ok()) return Finish(s, kNotRunning);
  auto fd = SocketInNetns(*job, AF_INET, SOCK_STREAM);
  if (!fd.ok()) return Finish(s, fd.status().message());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc = ::connect(*fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  Connected(s, *fd, rc == 0 ? 0 : errno);
}

void TunnelEndpoint::StartJupyter(Stream& s, const TaskState& t) {
  // The path may exceed sun_path: connect through a descriptor of the
  // directory. The job owns the directory and what is in it: it is opened
  // without following a symlink, and the connect is made as the task's
  // account, so a socket name the job pointed at one of the host's (the
  // container engine's, say) is refused by the kernel, not reached as root.
  std::string dir = t.paths.work_dir() + "/" + kJupyterSocketDir;
  int dirfd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dirfd < 0) return Finish(s, "this session runs no Jupyter server");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "/proc/self/fd/%d/%s", dirfd,
                kJupyterSocketName);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int rc = -1;
  int err = errno;
  if (fd >= 0) {
    auto as = ScopedFsIdentity::Assume(FsIdentity{t.uid, t.uid});
    rc = as.ok() ? ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) : -1;
    err = as.ok() ? errno : EPERM;
  }
  ::close(dirfd);
  if (fd < 0) return Finish(s, "cannot reach the Jupyter server: " + Errno(err));
  if (rc != 0 && err != EINPROGRESS && err != EAGAIN) {
    ::close(fd);
    if (err == ENOENT || err == ECONNREFUSED)
      return Finish(s, "the session's Jupyter server is not running (yet)");
    return Finish(s, "cannot reach the Jupyter server: " + Errno(err));
  }
  Connected(s, fd, rc == 0 ? 0 : EINPROGRESS);
}

std::string TunnelEndpoint::ConnectError(const Stream& s, int err) {
  std::string what = s.kind == TunnelTarget::Kind::kTcp
                         ? "cannot connect to port " + std::to_string(s.port) + " in the session"
                         : "cannot reach the Jupyter server";
  return what + ": " + Errno(err);
}

void TunnelEndpoint::Connected(Stream& s, int fd, int err) {
  if (err != 0 && err != EINPROGRESS && err != EAGAIN) {
    ::close(fd);
    return Finish(s, ConnectError(s, err));
  }
  s.write_fd = fd;
  s.sources.push_back({fd, ExecFrameType::kStdout});
  if (err == 0) {
    WatchRead(s, fd);
    Flush(s);
    return;
  }
  s.connecting = true;
  uint32_t id = s.id;
  loop_.WatchWritable(fd, [this, id, fd] {
    auto it = streams_.find(id);
    if (it == streams_.end()) return false;
    Stream& st = *it->second;
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    st.connecting = false;
    if (err != 0) {
      // Posted: Finish closes the fd this callback belongs to.
      Post([this, id, why = ConnectError(st, err)] {
        if (auto i = streams_.find(id); i != streams_.end()) Finish(*i->second, why);
      });
      return false;
    }
    // Posted too: re-arming this fd's watches from its own callback is undone by its return.
    Post([this, id] {
      auto i = streams_.find(id);
      if (i == streams_.end()) return;
      WatchRead(*i->second, i->second->write_fd);
      Flush(*i->second);
    });
    return false;
  });
}

void TunnelEndpoint::StartExec(Stream& st) {
  uint32_t id = st.id;
  {
    if (st.tty) {
      st.write_fd = st.proc.pty;
      st.sources.push_back({st.proc.pty, ExecFrameType::kStdout});
    } else {
      st.write_fd = st.proc.in;
      st.sources.push_back({st.proc.out, ExecFrameType::kStdout});
      st.sources.push_back({st.proc.err, ExecFrameType::kStderr});
    }
    for (auto& src : st.sources) WatchRead(st, src.fd);
    st.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, st.proc.pid, 0));
    if (st.pidfd >= 0) {
      int pidfd = st.pidfd;
      loop_.WatchReadable(pidfd, [this, id] {
        auto i = streams_.find(id);
        if (i == streams_.end()) return false;
        Stream& x = *i->second;
        if (!x.exit_code) x.exit_code = ReapExec(x.proc.pid);
        if (!x.exit_code) return true;
        Post([this, id] {
          if (auto j = streams_.find(id); j != streams_.end()) MaybeFinish(*j->second);
        });
        return false;
      });
    } else {
      st.timer = loop_.RunAfter(kExitPollMs, [this, id] { PollExit(id); });
    }
    ApplyExecFrames(st);
    Flush(st);
  }
}

void TunnelEndpoint::PollExit(uint32_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  Stream& s = *it->second;
  s.timer = 0;
  s.exit_code = ReapExec(s.proc.pid);
  if (s.exit_code) return MaybeFinish(s);
  s.timer = loop_.RunAfter(kExitPollMs, [this, id] { PollExit(id); });
}

void TunnelEndpoint::WatchRead(Stream& s, int fd) {
  uint32_t id = s.id;
  loop_.WatchReadable(fd, [this, id, fd] { return ReadFrom(id, fd); });
}

bool TunnelEndpoint::ReadFrom(uint32_t id, int fd) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return false;
  Stream& s = *it->second;
  Stream::Source* src = nullptr;
  for (auto& x : s.sources) {
    if (x.fd == fd) src = &x;
  }
  if (src == nullptr || src->eof) return false;
  char buf[kReadChunk];
  while (true) {
    if (mux_->buffered(id) >= kReadAhead) {
      src->paused = true;  // NextFrame resumes it
      return false;
    }
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      std::string_view data(buf, static_cast<size_t>(n));
      if (s.exec) {
        mux_->Write(id, proto::EncodeExecFrame(src->type, data));
      } else {
        mux_->Write(id, data);
      }
      Wake();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    // End of file; a terminal's master reads EIO once no process has the terminal open.
    src->eof = true;
    Post([this, id] {
      auto i = streams_.find(id);
      if (i == streams_.end()) return;
      Stream& x = *i->second;
      if (x.exec) return MaybeFinish(x);
      // The service closed its side: so does the stream (a half close).
      if (!x.local_closed) {
        x.local_closed = true;
        mux_->Close(id);
        Wake();
      }
      if (x.remote_closed && x.to_fd.empty()) Forget(id);
    });
    return false;
  }
}

void TunnelEndpoint::Data(uint32_t id, std::string_view data) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;  // refused or finished: the peer closes too
  Stream& s = *it->second;
  if (s.exec) {
    s.reader.Feed(data);
    if (s.proc.pid > 0) ApplyExecFrames(s);
    return;
  }
  if (s.shut_write) {
    mux_->Consumed(id, data.size());
    return;
  }
  s.to_fd.append(data);
  if (!s.connecting && s.write_fd >= 0) Flush(s);
}

void TunnelEndpoint::ApplyExecFrames(Stream& s) {
  while (true) {
    auto f = s.reader.Next();
    if (!f.ok()) {
      // A broken client: tell it, and end the command.
      return Finish(s, f.status().message());
    }
    if (!*f) break;
    const proto::ExecFrame& frame = **f;
    // Everything but stdin's payload is used now; the payload once written.
    mux_->Consumed(s.id, proto::kExecHeaderBytes +
                             (frame.type == ExecFrameType::kStdin ? 0 : frame.payload.size()));
    switch (frame.type) {
      case ExecFrameType::kStdin:
        if (s.shut_write || s.stdin_eof) {
          mux_->Consumed(s.id, frame.payload.size());
        } else {
          s.to_fd.append(frame.payload);
        }
        break;
      case ExecFrameType::kStdinEof:
        s.stdin_eof = true;
        break;
      case ExecFrameType::kResize: {
        auto r = proto::DecodeExecResize(frame.payload);
        if (!r.ok()) return Finish(s, r.status().message());
        if (s.tty) ResizeExec(s.proc.pty, r->rows, r->cols);
        break;
      }
      case ExecFrameType::kSignal: {
        auto sig = proto::DecodeExecSignal(frame.payload);
        if (!sig.ok()) return Finish(s, sig.status().message());
        if (*sig < 1 || *sig >= NSIG)
          return Finish(s, "exec stream: no signal " + std::to_string(*sig));
        if (s.exit_code) break;
        // With a terminal, to its foreground job (as a key would); else to the command's group.
        pid_t group = s.proc.pid;
        if (s.tty) {
          pid_t fg = -1;
          if (::ioctl(s.proc.pty, TIOCGPGRP, &fg) == 0 && fg > 0) group = fg;
        }
        ::kill(-group, *sig);
        break;
      }
      default:
        return Finish(s, "exec stream: the client sent an agent's frame (type " +
                             std::to_string(static_cast<int>(frame.type)) + ")");
    }
  }
  Flush(s);
}

void TunnelEndpoint::Flush(Stream& s) {
  if (s.write_fd < 0 || s.connecting) return;
  size_t written = 0;
  while (written < s.to_fd.size() && !s.shut_write) {
    ssize_t n = ::write(s.write_fd, s.to_fd.data() + written, s.to_fd.size() - written);
    if (n > 0) {
      written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    // The reader is gone (EPIPE, a reset): what is left is dropped.
    written = s.to_fd.size();
    s.shut_write = true;
  }
  if (written > 0) {
    s.to_fd.erase(0, written);
    mux_->Consumed(s.id, written);
    Wake();
  }
  if (!s.to_fd.empty()) {
    if (!s.write_watched) {
      s.write_watched = true;
      uint32_t id = s.id;
      int fd = s.write_fd;
      loop_.WatchWritable(fd, [this, id] {
        auto it = streams_.find(id);
        if (it == streams_.end()) return false;
        Stream& x = *it->second;
        x.write_watched = false;
        // Posted: Flush may re-arm this very watch, which the return would undo.
        Post([this, id] {
          if (auto i = streams_.find(id); i != streams_.end()) Flush(*i->second);
        });
        return false;
      });
    }
    return;
  }
  // Everything written: pass on an end of input.
  bool end = s.exec ? s.stdin_eof || s.remote_closed : s.remote_closed;
  if (!end || s.shut_write) return;
  if (s.exec && s.tty) {
    // A terminal has no end of input, only its EOF character, which a
    // program reading lines (canonical mode) takes as one; a program in
    // raw mode gets nothing.
    termios tio{};
    if (s.stdin_eof && ::tcgetattr(s.write_fd, &tio) == 0 && (tio.c_lflag & ICANON)) {
      char eof = static_cast<char>(tio.c_cc[VEOF]);
      (void)!::write(s.write_fd, &eof, 1);
    }
    s.shut_write = true;
    return;
  }
  s.shut_write = true;
  if (s.exec) {
    if (s.proc.in >= 0) {
      loop_.UnwatchFd(s.proc.in);
      ::close(s.proc.in);
      s.proc.in = -1;
      s.write_fd = -1;
    }
    return;
  }
  ::shutdown(s.write_fd, SHUT_WR);
  bool all_eof = true;
  for (auto& src : s.sources) all_eof = all_eof && src.eof;
  if (all_eof && s.local_closed) Forget(s.id);
}

void TunnelEndpoint::RemoteClosed(uint32_t id, const std::string& reason) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  Stream& s = *it->second;
  s.remote_closed = true;
  if (s.exec) {
    // The client is gone: nobody reads the command's output any more.
    if (!s.exit_code || !s.local_closed) return Finish(s, "");
    return Forget(id);
  }
  if (!reason.empty()) return Finish(s, "");  // an abort, not an end of input
  Flush(s);
}

void TunnelEndpoint::MaybeFinish(Stream& s) {
  if (!s.exec || !s.exit_code || s.local_closed) return;
  bool drained = true;
  for (auto& src : s.sources) drained = drained && src.eof;
  if (!drained && !s.draining) {
    s.draining = true;
    uint32_t id = s.id;
    loop_.Cancel(s.timer);
    s.timer = loop_.RunAfter(kDrainMs, [this, id] {
      auto it = streams_.find(id);
      if (it == streams_.end()) return;
      it->second->timer = 0;
      for (auto& src : it->second->sources) src.eof = true;
      MaybeFinish(*it->second);
    });
    return;
  }
  if (!drained) return;
  // A sandbox's commands die of SIGKILL with their task, or of the stop's
  // SIGTERM when the provider takes the GPU back, a moment before the
  // task's end is known here: wait for it, so the user reads why.
  auto task = tasks_.tasks().find(s.attempt);
  bool vacating = task != tasks_.tasks().end() && !task->second.vacate_reason.empty();
  bool by_signal = *s.exit_code == 128 + SIGKILL || (*s.exit_code > 128 && vacating);
  if (by_signal && !s.waited_for_task) {
    s.waited_for_task = true;
    uint32_t id = s.id;
    s.timer = loop_.RunAfter(kTaskEndWaitMs, [this, id] {
      auto it = streams_.find(id);
      if (it == streams_.end()) return;
      it->second->timer = 0;
      MaybeFinish(*it->second);
    });
    return;
  }
  if (s.timer != 0) return;  // still waiting
  mux_->Write(s.id, proto::EncodeExecExit(*s.exit_code));
  Finish(s, "");
}

void TunnelEndpoint::Finish(Stream& s, const std::string& reason) {
  uint32_t id = s.id;
  if (!s.local_closed) {
    s.local_closed = true;
    mux_->Close(id, reason);
    Wake();
  }
  Forget(id);
}

void TunnelEndpoint::Forget(uint32_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  std::unique_ptr<Stream> s = std::move(it->second);
  streams_.erase(it);
  if (!s->local_closed) mux_->Close(id);
  loop_.Cancel(s->timer);
  std::vector<int> fds;
  for (auto& src : s->sources) fds.push_back(src.fd);
  for (int fd : {s->write_fd, s->pidfd, s->proc.pty, s->proc.in, s->proc.out, s->proc.err})
    fds.push_back(fd);
  std::sort(fds.begin(), fds.end());
  fds.erase(std::unique(fds.begin(), fds.end()), fds.end());
  for (int fd : fds) {
    if (fd < 0) continue;
    loop_.UnwatchFd(fd);
    ::close(fd);
  }
  if (s->exec && s->proc.pid > 0 && !s->exit_code) {
    // Hang up on the command as a closed terminal would, then make sure.
    pid_t pid = s->proc.pid;
    ::kill(-pid, SIGHUP);
    ::kill(-pid, SIGCONT);
    if (ReapExec(pid)) return;
    // The loop, not the endpoint, outlives this: the reaping goes on after a Reset.
    net::EventLoop* loop = &loop_;
    auto reap = std::make_shared<std::function<void(int)>>();
    std::weak_ptr<std::function<void(int)>> weak = reap;
    *reap = [loop, pid, weak](int waited_ms) {
      if (ReapExec(pid)) return;
      if (waited_ms >= kHangupGraceMs) ::kill(-pid, SIGKILL);
      auto self = weak.lock();
      if (self) loop->RunAfter(50, [self, waited_ms] { (*self)(waited_ms + 50); });
    };
    loop->RunAfter(50, [reap] { (*reap)(50); });
  }
}

void TunnelEndpoint::TaskEnded(const std::string& attempt_id, const std::string& reason) {
  std::vector<uint32_t> ids;
  for (auto& [id, s] : streams_) {
    if (s->attempt == attempt_id) ids.push_back(id);
  }
  for (uint32_t id : ids) {
    auto it = streams_.find(id);
    if (it == streams_.end()) continue;
    Stream& s = *it->second;
    if (s.exec && s.exit_code && !s.local_closed)
      mux_->Write(id, proto::EncodeExecExit(*s.exit_code));
    Finish(s, reason);
  }
}

void TunnelEndpoint::CheckTasks() {
  std::map<std::string, std::string> ended;
  for (auto& [id, s] : streams_) {
    if (ended.count(s->attempt)) continue;
    auto it = tasks_.tasks().find(s->attempt);
    if (it == tasks_.tasks().end()) {
      ended[s->attempt] = "session ended";
    } else if (tasks_.Ended(it->second) || it->second.job_exited) {
      ended[s->attempt] = EndReason(it->second);
    }
  }
  for (const auto& [attempt, reason] : ended) TaskEnded(attempt, reason);
}

void TunnelEndpoint::Reset() {
  std::vector<uint32_t> ids;
  for (auto& [id, s] : streams_) ids.push_back(id);
  for (uint32_t id : ids) Forget(id);
  mux_ = MakeMux();
}

}  // namespace gpupool::agent
