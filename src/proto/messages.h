// The agent channel protocol: typed messages carried as JSON text frames
// over one WebSocket that the agent opens to the server.
//
// Every frame is an Envelope {"v":1,"seq":N,"ack":M,"type":T,"body":{...}}.
//  - seq > 0 marks a reliable message: the sender keeps it until the peer
//    acks it and resends it after a reconnect; the receiver applies each seq
//    once, in order. seq == 0 marks a message that is never resent (hello,
//    welcome, heartbeat, ack): losing one is harmless.
//  - ack is the highest seq the sender of the frame has applied from its
//    peer, on every frame.
//
// Handshake: the agent sends `hello` (its node, GPUs and the tasks it holds);
// the server answers `welcome` (the node id, the last agent seq it applied,
// where each attempt's log resumes). Then both resend what the other has not
// acked. Reliable messages are also idempotent (reports name the attempt and
// log lines carry their byte offset), so a resend after a crash of either
// side never applies anything twice.
//
// Decoding is strict and never throws: a malformed frame yields
// InvalidArgument naming the field ("body.gpus[1].memory_mib: must be an
// integer"). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"
#include "model/job.h"
#include "model/node.h"
#include "model/resources.h"

namespace gpupool::proto {

inline constexpr int kProtocolVersion = 1;

struct Envelope {
  int version = kProtocolVersion;
  int64_t seq = 0;
  int64_t ack = 0;
  std::string type;
  std::string body;  // JSON object text
};

std::string EncodeEnvelope(const Envelope& e);
Result<Envelope> DecodeEnvelope(std::string_view text);

// ---- agent -> server ----

// What an agent knows about one of its tasks:
//  starting: the agent accepted the start order and prepares the task; sent
//            only for rank 0 of a torch gang, carrying the rendezvous it chose.
//  running:  the task's process runs.
//  exited:   it exited (exit_code set; signal > 0 if killed by a signal).
//  failed:   it could not run or broke a limit; reason says why.
//  lost:     the agent lost track of it.
//  vacated:  the provider took its GPU back and the task was stopped: the
//            job is requeued at the front of its class, its work since the
//            last checkpoint lost.
//  refused:  the provider's policy refused the start order; nothing ran: the
//            job is requeued and avoids this node for a while.
// On the wire a state is its name (TaskStateName); a name outside this
// table is a protocol error naming the field and the value, never read as
// any state (an agent is not trusted).
enum class TaskState : int8_t { kStarting, kRunning, kExited, kFailed, kLost, kVacated, kRefused };
inline constexpr TaskState kAllTaskStates[] = {
    TaskState::kStarting, TaskState::kRunning, TaskState::kExited, TaskState::kFailed,
    TaskState::kLost,     TaskState::kVacated, TaskState::kRefused};
std::string_view TaskStateName(TaskState s);  // "starting", "running", ...
// InvalidArgument 'unknown task state "x" (one of: starting, ...)' otherwise.
Result<TaskState> ParseTaskState(std::string_view name);
// Still starting or running: the task holds its node's resources and has not ended.
inline bool IsActive(TaskState s) { return s == TaskState::kStarting || s == TaskState::kRunning; }

struct TaskReport {
  TaskReport() = default;
  // The common fields in order; the rendezvous is set by name.
  TaskReport(std::string attempt_id, TaskState state, int32_t exit_code = 0, int32_t signal = 0,
             std::string reason = "", int64_t ts_ms = 0)
      : attempt_id(std::move(attempt_id)),
        state(state),
        exit_code(exit_code),
        signal(signal),
        reason(std::move(reason)),
        ts_ms(ts_ms) {}

  std::string attempt_id;
  TaskState state = TaskState::kRunning;
  int32_t exit_code = 0;
  int32_t signal = 0;
  std::string reason;
  int64_t ts_ms = 0;
  // Rank 0 of a torch gang: where the other ranks find it, as its agent
  // chose it ("10.0.0.5", 29533); empty and 0 otherwise. Sent with every
  // report of that task, so that a restarted agent repeats it.
  std::string master_addr;
  int32_t master_port = 0;
  friend bool operator==(const TaskReport&, const TaskReport&) = default;
};

struct Hello {
  std::string node_name;
  std::string agent_instance;  // random per agent process start
  std::string agent_version;
  int64_t last_server_seq = 0;  // highest server seq the agent has applied
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::vector<GpuInfo> gpus;
  std::string driver_version;
  std::string cuda_version;
  std::map<std::string, std::string> labels;
  std::vector<TaskReport> tasks;  // every task the agent holds
  std::string owner_group;        // the group (lab) that owns the machine; may be empty
  // What the provider lends now; absent from agents that predate policies.
  std::optional<NodeLending> lending;
  friend bool operator==(const Hello&, const Hello&) = default;
};

struct Heartbeat {
  std::vector<GpuTelemetry> telemetry;
  int32_t running_tasks = 0;
  std::vector<ShareUse> shares;  // the GPU shares running here: caps and use
  friend bool operator==(const Heartbeat&, const Heartbeat&) = default;
};

// `leave`: the agent drained and deregisters; the node is marked left once
// the server applies it, and the agent exits when it sees the ack.
struct Leave {
  std::string reason;
  friend bool operator==(const Leave&, const Leave&) = default;
};

struct LogChunkLine {
  int64_t offset = 0;  // byte offset of the line in the attempt's log
  std::string stream;  // "stdout" or "stderr"
  int64_t ts_ms = 0;
  std::string text;
  friend bool operator==(const LogChunkLine&, const LogChunkLine&) = default;
};

// Encoded as {"attempt_id", "lines": [{"offset", "stream", "ts_ms",
// "text"}, ...]}, or, with `compact` (to servers whose welcome says
// log_records), as {"attempt_id", "offsets": [...], "records": ["...", ...]}:
// the lines' offsets, and the lines as text records "<k> <ts_ms> <text>\n"
// (k: o stdout, e stderr, v event), one per offset, in strings of whole
// records of at most 60 KiB, which costs a server a fraction of the time to
// decode. Lines a record cannot carry (a newline or invalid UTF-8 in the
// text) make Encode fall back to the first form. Decoding accepts both.
struct LogChunk {
  std::string attempt_id;
  std::vector<LogChunkLine> lines;
  bool compact = false;
  friend bool operator==(const LogChunk&, const LogChunk&) = default;
};

// `lease`, unsequenced, both ways: the agent asks for its attempts' leases
// to be renewed, stamping the request with its own monotonic clock
// (Clock::MonoMs); the server answers at once with the same stamp. On the
// answer the agent moves every lease's deadline to sent_ms + the lease
// (Welcome::attempt_lease_ms): the server received the request after
// sent_ms, so it knows the deadline is no later than its receive time plus
// the lease (server/node_liveness.h).
struct Lease {
  int64_t sent_ms = 0;
  friend bool operator==(const Lease&, const Lease&) = default;
};

// ---- server -> agent ----

struct Welcome {
  std::string node_id;
  int64_t last_agent_seq = 0;  // highest agent seq applied for this agent_instance
  int64_t heartbeat_ms = 5000;
  // attempt id -> offset of the last output line the server has (-1: none);
  // the agent resumes right after that line.
  std::map<std::string, int64_t> log_offsets;
  // How long each renewal of an attempt's lease lasts (see Lease): a task
  // whose agent has not renewed it for this long is stopped by its shim, so
  // that the server may start the job elsewhere without two copies alive.
  // 0 = no leases (older servers).
  int64_t attempt_lease_ms = 0;
  // The server decodes compact logs messages (LogChunk::compact); false
  // from older servers.
  bool log_records = false;
  friend bool operator==(const Welcome&, const Welcome&) = default;
};

// A rank's place in a gang (StartTask::gang): what the agent puts in the
// job's environment (torchrun's variables for torch, GPUPOOL_* for both).
struct GangRank {
  int32_t rank = 0;   // NODE_RANK = RANK (one process per node)
  int32_t nodes = 1;  // WORLD_SIZE = GPUPOOL_NNODES
  Distributed mode = Distributed::kTorch;
  // torch: rank 0's rendezvous. Rank 0's order leaves both empty: its agent
  // chooses a free port, starts it, and reports the pair ("starting");
  // the server then starts the other ranks with it.
  std::string master_addr;
  int32_t master_port = 0;
  friend bool operator==(const GangRank&, const GangRank&) = default;
};

struct StartTask {
  std::string attempt_id;
  int64_t job_id = 0;
  std::string owner;  // the job's owner, for the provider's user policy
  JobSpec spec;
  std::vector<std::string> gpu_uuids;
  // Per GPU: 1000 for whole GPUs; a share (1..999) of the one GPU in
  // gpu_uuids, with `gpu_memory_mib` of its memory (0 = no reservation).
  // Absent (0) from older servers means whole GPUs.
  int32_t gpu_milli = 0;
  int64_t gpu_memory_mib = 0;
  // The checkpoint to restore before the job starts (its number within the
  // job, and its manifest id in the blob store); 0 and "" = start afresh.
  int64_t restore_checkpoint = 0;
  std::string restore_manifest;
  // Set for a rank of a multi-node job; only rank 0 uploads checkpoints.
  std::optional<GangRank> gang;
  // The server's output limit per attempt rank (--max-job-output); the
  // agent may lower it (its provider's policy). 0 from an older server: the
  // agent's default (model/job_output.h).
  int64_t max_output_bytes = 0;
  friend bool operator==(const StartTask&, const StartTask&) = default;
};

struct StopTask {
  std::string attempt_id;
  std::string reason;  // "cancelled", "stale attempt", "preempted for ...", ...
  // SIGTERM to SIGKILL; 0 = the agent's own default (--kill-grace-ms).
  int64_t grace_ms = 0;
  // The job is requeued after the stop (a preemption): a job that
  // checkpoints gets its checkpoint signal first, and its newest checkpoint
  // is uploaded before the attempt's end is reported.
  bool requeue = false;
  friend bool operator==(const StopTask&, const StopTask&) = default;
};

// Stage a job's checkpoint ahead of its start order: the server expects the
// job to start on this node soon (its provider is reclaiming its GPU, or it
// is preempted, and this node is where the scheduler would place it now).
// The agent restores the checkpoint into its staging area, so that the
// start order, when it comes, patches only what changed since. A hint:
// ignoring it costs only time.
struct StageCheckpoint {
  int64_t job_id = 0;
  int64_t checkpoint = 0;  // its number within the job
  std::string manifest;    // its manifest id in the blob store
  friend bool operator==(const StageCheckpoint&, const StageCheckpoint&) = default;
};

// The machine's owner, through the server (the dashboard's My machines, or
// `POST /v1/nodes/{name}/pause|resume|reclaim`): the agent applies it as it
// applies its control socket's command of the same name (agent/provider.h),
// and answers with a node event. The agent does not take the server's word
// for more than that: a resume does not lift a pause or reclaim made on the
// machine itself.
struct OwnerCommand {
  std::string command;            // "pause", "resume" or "reclaim"
  std::vector<std::string> gpus;  // reclaim: GPU indexes or uuids; empty: all
  bool now = false;               // reclaim: no grace period
  std::string by;                 // who asked, for the node's events
  friend bool operator==(const OwnerCommand&, const OwnerCommand&) = default;
};

// Message type names, as in Envelope::type.
inline constexpr std::string_view kHello = "hello";
inline constexpr std::string_view kWelcome = "welcome";
inline constexpr std::string_view kHeartbeat = "heartbeat";
inline constexpr std::string_view kTaskStatus = "task_status";
inline constexpr std::string_view kLogs = "logs";
inline constexpr std::string_view kStart = "start";
inline constexpr std::string_view kStop = "stop";
inline constexpr std::string_view kStage = "stage";
inline constexpr std::string_view kAck = "ack";
inline constexpr std::string_view kLease = "lease";
inline constexpr std::string_view kOwnerCommand = "owner_command";
// Reliable, agent -> server: a new NodeLending; a NodeEvent for the node's
// log (the server fills its node_id); Leave.
inline constexpr std::string_view kLending = "lending";
inline constexpr std::string_view kNodeEvent = "node_event";
inline constexpr std::string_view kLeave = "leave";

// Bodies as JSON object text, and back.
std::string Encode(const Hello& m);
std::string Encode(const Heartbeat& m);
std::string Encode(const TaskReport& m);
std::string Encode(const LogChunk& m);
std::string Encode(const Welcome& m);
std::string Encode(const StartTask& m);
std::string Encode(const StopTask& m);
std::string Encode(const StageCheckpoint& m);
std::string Encode(const OwnerCommand& m);
std::string Encode(const NodeLending& m);
std::string Encode(const NodeEvent& m);
std::string Encode(const Leave& m);
std::string Encode(const Lease& m);

Result<Hello> DecodeHello(std::string_view body);
Result<Heartbeat> DecodeHeartbeat(std::string_view body);
Result<TaskReport> DecodeTaskReport(std::string_view body);
Result<LogChunk> DecodeLogChunk(std::string_view body);
Result<Welcome> DecodeWelcome(std::string_view body);
Result<StartTask> DecodeStartTask(std::string_view body);
Result<StopTask> DecodeStopTask(std::string_view body);
Result<StageCheckpoint> DecodeStageCheckpoint(std::string_view body);
Result<OwnerCommand> DecodeOwnerCommand(std::string_view body);
Result<NodeLending> DecodeLending(std::string_view body);
Result<NodeEvent> DecodeNodeEvent(std::string_view body);
Result<Leave> DecodeLeave(std::string_view body);
Result<Lease> DecodeLease(std::string_view body);

// A reliable agent -> server message (kTaskStatus, kLogs, kLending,
// kNodeEvent, kLeave), decoded once by the agent hub into its typed value.
using AgentReport = std::variant<TaskReport, LogChunk, NodeLending, NodeEvent, Leave>;
// InvalidArgument naming the type when it is none of those five, or what is
// wrong in the body.
Result<AgentReport> DecodeAgentReport(std::string_view type, std::string_view body);

}  // namespace gpupool::proto
