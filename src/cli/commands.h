// The user and operator commands. Each returns the process exit code:
// 0 success, 1 failure, 2 bad usage or a rejected spec; `submit --wait`
// returns the job's own exit code.
#pragma once

#include <string>
#include <vector>

#include "cli/client.h"

namespace gpupool::cli {

struct GlobalFlags {
  std::string server;
  std::string token;
  std::string ca_fingerprint;    // pin the pool CA ("sha256:...")
  std::string ca_file;           // or trust this CA bundle
  bool insecure = false;         // or check nothing (development)
  std::string output = "table";  // "table" or "json"
};

struct SubmitFlags {
  std::string file;                  // job.yaml / job.json
  std::vector<std::string> command;  // argv after "--"
  std::string name;
  std::string gpus;  // "2", "0.5", "500m"; empty: not given
  std::string gpu_memory, cpus, memory, max_runtime;
  std::string priority;  // interactive, normal, opportunistic; empty: not given
  std::string group;
  std::string image;        // docker://..., oci-archive:/..., ...; empty: not given
  std::string executor;     // sandbox, process, docker, podman; empty: not given
  std::string disk;         // work directory cap; empty: not given
  std::string mig;          // a MIG profile ("1g.10gb"); empty: not given
  int nodes = 0;            // a multi-node job's nodes; 0: not given
  int max_restarts = -1;    // -1: not given
  std::string distributed;  // torch or none; empty: not given
  std::string workdir;      // upload this directory as the job's inputs; overrides the spec's
  bool no_network = false;
  bool host_network = false;  // network: host (where the provider allows it)
  std::vector<std::string> gpu_models;
  std::vector<std::string> env;  // KEY=VALUE
  bool wait = false;
  bool follow = false;  // stream logs while waiting
  bool quiet = false;   // no upload progress or summary
  bool dry_run = false;  // show what it would cost; submit nothing
};

int CmdSubmit(const GlobalFlags& g, const SubmitFlags& f);
// `accounting`: with each job's GPU-hours and cost as the ledger has them.
int CmdJobs(const GlobalFlags& g, const std::string& states, int limit, bool all_users,
            bool accounting = false);
int CmdJob(const GlobalFlags& g, const std::string& id);
// `rank` >= 0: only that rank of a multi-node job; -1: every rank, each
// line prefixed "[rank R] " when the job has several.
int CmdLogs(const GlobalFlags& g, const std::string& id, bool follow, int rank);
int CmdCancel(const GlobalFlags& g, const std::string& id);
int CmdNodes(const GlobalFlags& g);
// The providers' event log (reclaims, pauses, ...): one node's, or the
// pool's; `kind` limits it to one kind ("reclaim"); the newest `limit`.
int CmdEvents(const GlobalFlags& g, const std::string& node, const std::string& kind, int limit);
// Pending jobs in scheduler order, with why each waits (like squeue).
int CmdQueue(const GlobalFlags& g);
// Each group's weight, guarantee, allocation, usage and fair share (like sshare).
int CmdGroups(const GlobalFlags& g);
// Prints the join token; with `rotate`, replaces it first.
int CmdJoinToken(const GlobalFlags& g, bool rotate);
// A job's checkpoints (number, created, attempt, files, size, manifest).
int CmdCheckpoints(const GlobalFlags& g, const std::string& job);
// Restores checkpoint `number` (0: the newest) of `job` into `to` (empty:
// ./job-<id>-checkpoint-<n>), which must not exist or be empty.
int CmdCheckpointDownload(const GlobalFlags& g, const std::string& job, int64_t number,
                          const std::string& to);
// Runs the server's blob garbage collection now and prints what it removed.
int CmdAdminGc(const GlobalFlags& g);

// Prints "gpupool: <message>" and returns the exit code for `s`.
int ReportError(const Status& s);

}  // namespace gpupool::cli
