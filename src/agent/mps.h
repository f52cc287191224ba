// MpsDaemons: NVIDIA MPS on a node whose policy says `sharing: mps`
// (agent/policy.h). One nvidia-cuda-mps-control daemon per GPU that holds
// shares, started before the first share's task starts and told `quit`
// once the last share of that GPU has left:
//
//   DIR/<hash>/gpu        the GPU's UUID (<hash>: 16 hex digits of it, as
//                         a Unix socket's path must stay under 108 bytes)
//   DIR/<hash>/pipe       CUDA_MPS_PIPE_DIRECTORY: the daemon's sockets and
//                         its nvidia-cuda-mps-control.pid; 01777, as the
//                         MPS server runs as the client's account and makes
//                         its own pipes there. Bound into each client's
//                         sandbox (exec/mps_client.h).
//   DIR/<hash>/shm        the daemon's /dev/shm (a root agent starts it in
//                         a mount namespace of its own), bound at each
//                         client's /dev/shm; 01777, emptied when a daemon
//                         starts
//   DIR/<hash>/log        CUDA_MPS_LOG_DIRECTORY (control.log, server.log);
//                         01777 likewise; never bound into a sandbox
//   DIR/<hash>/daemon.out, control.out  what the control program printed
//
// The daemon runs with CUDA_VISIBLE_DEVICES = that GPU's UUID, so its MPS
// server sees that GPU only. DIR is the agent's (DATA_DIR/mps), closed to
// tasks; a pipe directory longer than 80 bytes is an error (the agent
// config's mps_dir names a shorter DIR).
//
// One MPS server serves one Linux user at a time (the control daemon makes
// a second user's clients wait until the first user's are done), so a GPU
// takes the shares of one pool user at a time (Acquire refuses another's;
// the scheduler knows, sched::GpuView::mps_user), and that user's tasks on
// the GPU run as one account (TaskManager gives them the same uid).
//
// Failures: Check asks each daemon for its servers (`get_server_list`) and
// notices a control daemon that is gone or an MPS server that went away
// while shares still used it (a fatal fault of one client takes its
// server down, and with it the other clients of that GPU). Each is
// reported once, naming the tasks it concerns; the daemon is restarted
// (quit, and started afresh by the next Acquire) once no share is left
// on it, and takes no new share before.
//
// Single-threaded (the agent's event loop). Runs the control program
// synchronously (posix_spawn, bounded by a timeout): each call returns
// within milliseconds for a working daemon.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace gpupool::agent {

// The program: `configured` (the agent config's mps_control or
// --mps-control: a path, or a name looked up on `path_env`) else
// nvidia-cuda-mps-control on `path_env`. FailedPrecondition saying where it
// looked when there is none.
Result<std::string> FindMpsControl(const std::string& configured, const std::string& path_env);

// A task that holds a share of an MPS GPU and still runs.
struct MpsClient {
  std::string attempt_id;
  std::string gpu_uuid;
  std::string user;  // the pool user whose job it is
};

// A failure Check found: on which GPU, what, and the tasks it concerns.
struct MpsFailure {
  std::string gpu_uuid;
  std::string reason;
  std::vector<std::string> attempts;
};

class MpsDaemons {
 public:
  struct Options {
    std::string control;  // the program (FindMpsControl)
    std::string dir;      // the agent config's mps_dir, else DATA_DIR/mps
    int64_t timeout_ms = 10'000;
  };
  explicit MpsDaemons(Options options) : options_(std::move(options)) {}
  ~MpsDaemons() = default;
  MpsDaemons(const MpsDaemons&) = delete;
  MpsDaemons& operator=(const MpsDaemons&) = delete;

  // Before a share of `gpu_uuid` for `user` starts (`live`: the shares that
  // run now): refuses (FailedPrecondition) when another user's share holds
  // the GPU or its daemon failed and still has shares; starts the daemon
  // when none runs (one left by an earlier agent is taken over). Returns
  // the GPU's pipe directory.
  Result<std::string> Acquire(const std::string& gpu_uuid, const std::string& user,
                              const std::vector<MpsClient>& live);

  // Quits the daemons whose GPUs no live share holds (a failed one is then
  // started afresh by the next Acquire). Also those an earlier agent left.
  void Release(const std::vector<MpsClient>& live);

  // Looks at each daemon with live shares, at most every `every_ms`
  // (`now_ms`: the agent's clock); returns the failures not reported before.
  std::vector<MpsFailure> Check(const std::vector<MpsClient>& live, int64_t now_ms,
                                int64_t every_ms = 2000);

  // The GPUs whose daemons run (for status and tests).
  std::vector<std::string> Running() const;
  std::string PipeDir(const std::string& gpu_uuid) const;
  std::string LogDir(const std::string& gpu_uuid) const;
  std::string GpuDir(const std::string& gpu_uuid) const;
  // The /dev/shm of the GPU's daemon and of its clients: MPS's shared
  // memory (cuda.shm.*) lives there, so each client's sandbox binds it over
  // its private /dev/shm. "" for an agent that is not root (it cannot give
  // the daemon a mount namespace; the daemon then uses the machine's
  // /dev/shm, which the sandbox does not show).
  std::string ShmDir(const std::string& gpu_uuid) const;

 private:
  struct Daemon {
    int64_t pid = 0;            // the control daemon's, from its pid file
    std::set<int64_t> servers;  // MPS servers seen while shares ran
    bool failed = false;        // reported; takes no share until restarted
  };
  Status Start(const std::string& gpu_uuid);
  void Quit(const std::string& gpu_uuid);
  // Runs the control program for `gpu_uuid` with `input` on its stdin
  // ("" for `-d`); its output.
  // `shm_dir`: run it in a mount namespace whose /dev/shm is that
  // directory (SpawnWithShm; root only).
  Result<std::string> RunControl(const std::string& gpu_uuid, const std::vector<std::string>& args,
                                 const std::string& input, const std::string& shm_dir = "");
  int64_t PidOf(const std::string& gpu_uuid) const;  // from the pid file; 0: none
  void Adopt();                                      // daemons an earlier agent left, once

  Options options_;
  std::map<std::string, Daemon> daemons_;
  bool adopted_ = false;
  int64_t last_check_ms_ = -1;
};

}  // namespace gpupool::agent
