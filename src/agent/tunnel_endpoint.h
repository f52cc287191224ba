// TunnelEndpoint: the agent's end of interactive sessions' tunnels (issue 9).
//
// The server opens streams over the agent channel (binary WebSocket
// messages carrying proto::TunnelMux frames; the agent only accepts) whose
// open frame names a proto::TunnelTarget. For each the endpoint checks that
// the target's task runs here and has started, then connects the stream:
//   tcp      127.0.0.1:port in the task's network namespace (a sandbox
//            without network has a loopback of its own)
//   jupyter  the notebook server's UNIX socket in the task's work directory
//            (kJupyterSocketDir in agent/task_exec.h; the shim tells the job where)
//   exec     a command run inside the task (agent/task_exec.h), its bytes
//            in proto/exec_stream.h frames
// and pumps bytes both ways with back-pressure: a descriptor is read only
// while the stream's unsent bytes are under one frame batch (kReadAhead),
// and received bytes are granted back to the server (TunnelMux::Consumed)
// only once written to the descriptor, so a slow reader on either side
// holds at most one window in flight.
//
// The endpoint does not send: it calls `wake` when frames may be ready and
// the agent pulls them with NextFrame() while its connection's queue is
// short, so its own messages never wait behind more than that queue.
// When a task ends its streams are closed with a reason the user sees;
// Reset() (the channel is gone) drops every stream, killing exec'd
// commands, and starts a fresh mux for the next connection.
//
// Single-threaded: everything runs on the agent's event loop.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "agent/task_exec.h"
#include "agent/tasks.h"
#include "net/event_loop.h"
#include "proto/tunnel_mux.h"

namespace gpupool::agent {

class TunnelEndpoint {
 public:
  struct Options {
    proto::TunnelMuxOptions mux;  // opens_odd is forced false: the agent accepts
    // docker / podman programs for exec into containers.
    std::string docker = "docker";
    std::string podman = "podman";
    std::function<void()> wake;  // frames may be ready: pull NextFrame()
  };

  TunnelEndpoint(net::EventLoop& loop, const TaskManager& tasks, Options options);
  ~TunnelEndpoint();
  TunnelEndpoint(const TunnelEndpoint&) = delete;
  TunnelEndpoint& operator=(const TunnelEndpoint&) = delete;

  // A binary message from the channel. An error is a protocol violation by
  // the server: drop the connection (and Reset).
  Status OnMessage(std::string_view bytes);
  // The next encoded frame to send as a binary message, or nullopt.
  std::optional<std::string> NextFrame();

  // The task ended (or is ending): its streams close with `reason`.
  void TaskEnded(const std::string& attempt_id, const std::string& reason);
  // Closes the streams of tasks that ended, with the reason the user sees
  // (see EndReason); call after TaskManager::Poll.
  void CheckTasks();
  // The channel is gone: drops every stream.
  void Reset();

  size_t streams() const { return streams_.size(); }

  // What a session's user reads when its task ends: "session ended: the
  // provider reclaimed the GPU (<vacate reason>)", "session ended: exited
  // with code 0", "session ended: stopped: cancelled".
  static std::string EndReason(const TaskState& t);

 private:
  struct Stream;
  void Opened(uint32_t id, const std::string& target);
  void Data(uint32_t id, std::string_view data);
  void RemoteClosed(uint32_t id, const std::string& reason);
  void Refuse(uint32_t id, const std::string& reason);
  void StartTcp(Stream& s, int port);
  void StartJupyter(Stream& s, const TaskState& t);
  void StartExec(Stream& s);
  // Without a pidfd (kernels before 5.3): checks for the command's exit now and then.
  void PollExit(uint32_t id);
  // `err`: 0 connected, EINPROGRESS pending, else the connect's failure.
  void Connected(Stream& s, int fd, int err);
  static std::string ConnectError(const Stream& s, int err);
  // Reading from descriptors into the mux, and writing what arrived.
  void WatchRead(Stream& s, int fd);
  bool ReadFrom(uint32_t id, int fd);
  void Flush(Stream& s);
  void ApplyExecFrames(Stream& s);
  void MaybeFinish(Stream& s);
  void Finish(Stream& s, const std::string& reason);
  void Forget(uint32_t id);
  void Wake();
  // Runs `fn` on the loop soon, unless the endpoint is gone by then.
  void Post(std::function<void()> fn);
  std::unique_ptr<proto::TunnelMux> MakeMux();

  net::EventLoop& loop_;
  const TaskManager& tasks_;
  Options options_;
  std::unique_ptr<proto::TunnelMux> mux_;
  std::map<uint32_t, std::unique_ptr<Stream>> streams_;
  bool wake_posted_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for timers and posts
};

}  // namespace gpupool::agent
