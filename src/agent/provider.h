// Provider: the machine owner's side of the agent. It keeps what is lent
// (agent/lending.h, from the policy in force, the time, the GPUs' telemetry
// and the owner's commands) current every second, checks start orders
// against it, vacates tasks that may no longer run, tells the server what
// changed (the lending, a reclaim record), and serves the owner's commands
// on the control socket (agent/control_socket.h): status, pause, resume,
// reclaim, leave, policy, reload. All of it works with the server
// unreachable: messages wait in the agent's outbox.
//
// The policy in force is DATA_DIR/policy.yaml when `gpupool agent policy
// FILE` left one, else the agent config's.
//
// Single-threaded: on the agent's event loop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/agent_config.h"
#include "agent/control_socket.h"
#include "agent/lending.h"
#include "agent/mps.h"
#include "agent/share_loop.h"
#include "agent/tasks.h"
#include "common/clock.h"
#include "common/status.h"
#include "gpu/gpu_source.h"
#include "net/event_loop.h"
#include "proto/messages.h"

namespace gpupool::agent {

class Provider {
 public:
  // What the provider needs of the agent.
  struct Host {
    // Queues a reliable message for the server; returns its seq.
    std::function<int64_t(std::string_view type, std::string body)> push;
    // The agent's side of `status`: node, node id, server, connected.
    std::function<nlohmann::json()> describe;
    // The node has left the pool: stop the agent.
    std::function<void()> exit;
  };
  struct Options {
    std::string data_dir;
    std::string config_file;  // empty: the agent runs with the default config
  };

  // `config` (the agent's, whose policy and owner `reload` replaces) and
  // `tasks` must outlive the Provider.
  Provider(Options options, AgentConfig& config, net::EventLoop& loop, const Clock& clock,
           TaskManager& tasks, Host host);
  ~Provider();

  // Reads the policy in force and opens the control socket. `source` (the
  // GPUs' telemetry, for idle-only lending) must outlive the Provider.
  // `interposer_usable`: whether libgpushare.so can be injected here
  // (without it the node lends whole GPUs only). A policy that says
  // `sharing: mps` on a machine without nvidia-cuda-mps-control is an error.
  Status Init(std::vector<GpuInfo> gpus, GpuSource* source, bool interposer_usable);
  // Starts the once-a-second evaluation.
  void Start();
  // Stops it and closes the control socket.
  void Stop();

  // The machine's GPUs, as the agent last reported them.
  // The GPU shares running here, their caps and what NVML says they hold
  // (as of the last tick), for the heartbeat.
  const std::vector<ShareUse>& share_uses() const { return share_uses_; }

  void SetGpus(std::vector<GpuInfo> gpus) { gpus_ = std::move(gpus); }
  // What is lent now; the caller puts it in its hello (the server has it then).
  const NodeLending& LendingForHello();

  // Why the policy refuses this start order now, or OK. A refusal also
  // resends the lending, so that the server does not place it here again.
  Status Admit(const proto::StartTask& start);
  // After Admit, for a share of a GPU: refuses one whose memory cap does not
  // fit beside the caps already on its GPU (agent/task_gpus.h
  // ShareCapFits). On an MPS node (agent/mps.h) it also makes sure the
  // GPU's MPS control daemon runs and names its pipe directory in
  // `gpus.share`, and refuses a share of another user than the one whose
  // shares hold the GPU. Nothing for other tasks.
  Status PrepareShare(const proto::StartTask& start, TaskGpus& gpus);
  // The output limit of a task the server started with `server_bytes`: the
  // policy's max_job_output may lower it (model/job_output.h).
  int64_t OutputLimit(int64_t server_bytes) const;

  // The agent noticed tasks ending: answers reclaims and a leave waiting
  // for them.
  void TasksChanged();
  // The server applied our messages up to `seq`.
  void Acked(int64_t seq);

  // Quits the MPS daemons no running share uses (the agent is exiting;
  // the daemons of tasks that outlive it stay, and a restarted agent takes
  // them over).
  void ReleaseIdleMps() {
    if (mps_) mps_->Release(MpsClients());
  }

  // The owner's pause, resume or reclaim sent through the server
  // (proto::OwnerCommand): applied as the control socket's command, except
  // that a resume does not lift what was held on the machine itself. The
  // answer goes to the server as a node event ("refused" when it failed).
  void FromServer(const proto::OwnerCommand& command);

  // A command from this process itself (SIGHUP: reload); the answer is logged.
  void LocalCommand(const std::string& command);

 private:
  struct Waiter;  // a reclaim waiting for its tasks to end

  void OnControl(const ControlPeer& peer, const nlohmann::json& request, ControlReply reply);
  Result<ProviderPolicy> PolicyInForce() const;
  std::string PolicySource() const;
  std::string PolicyOverridePath() const { return options_.data_dir + "/policy.yaml"; }
  void Tick(int64_t grace_ms = 0);
  void EnforceGpuMemoryCaps();
  Status AdmitShareCap(const proto::StartTask& start, const exec::GpuShare& share) const;
  // MPS (agent/mps.h): starts the daemons' keeper when the policy says
  // mps; the shares that are its clients now; failures reported.
  Status EnsureMps();
  std::vector<MpsClient> MpsClients() const;
  void CheckMps(int64_t now);
  void SendLending(bool force);
  void RecordReclaims(const NodeLending& before,
                      const std::vector<std::pair<std::string, std::string>>& vacated,
                      const std::vector<Lender::RunningTask>& running, int64_t now);
  void PushEvent(const std::string& kind, const std::string& reason);
  void ApplyPolicy(ProviderPolicy policy, const std::string& what, ControlReply reply);
  // pause, resume, reclaim (of `gpus` by index or uuid, every GPU when
  // empty; `at_once`: no grace): from the control socket (`by` empty) or
  // from the server on behalf of `by`.
  void OwnerHold(const std::string& cmd, const std::vector<std::string>& gpus, bool at_once,
                 const std::string& by, ControlReply reply);
  void Reclaim(const std::vector<std::string>& uuids, bool at_once, ControlReply reply);
  void CheckLeave();
  std::optional<std::string> FindGpu(const std::string& name) const;
  std::string DescribeGpus() const;
  nlohmann::json StatusJson() const;

  Options options_;
  AgentConfig& config_;
  net::EventLoop& loop_;
  const Clock& clock_;
  TaskManager& tasks_;
  GpuSource* gpu_source_ = nullptr;
  Host host_;
  std::vector<GpuInfo> gpus_;
  Lender lender_{ProviderPolicy{}, false};
  NodeLending lending_;
  std::optional<NodeLending> sent_lending_;  // what the server last heard
  bool evaluated_ = false;                   // lending_ holds a first evaluation
  std::vector<GpuTelemetry> telemetry_;      // the last sample, for idle-only lending
  std::set<std::string> over_cap_;           // stopped by the GPU memory backstop
  std::vector<ShareUse> share_uses_;         // the shares' caps and use, last tick
  ShareLoop shares_{loop_};                  // compute shares, synced in TasksChanged
  std::unique_ptr<MpsDaemons> mps_;          // set once the policy said sharing: mps
  net::EventLoop::TimerId timer_ = 0;
  bool stopped_ = false;
  std::unique_ptr<ControlServer> control_;
  std::vector<Waiter> waiters_;
  ControlReply leave_reply_;
  bool held_locally_ = false;  // paused or reclaimed on the control socket, not yet resumed
  int64_t leave_seq_ = 0;      // the seq of our leave message, once drained
};

}  // namespace gpupool::agent
