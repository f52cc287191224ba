// JobSpec parsing, validation and JSON mapping.
//
// A spec arrives as YAML or JSON text (the CLI reads job.yaml; the API takes
// JSON). Parsing is strict: unknown fields, wrong types, negative or absurd
// amounts and bad units are rejected with InvalidArgument naming the field
// path and the reason, e.g. "resources.gpu_memory: invalid size \"24XB\":
// unknown unit \"XB\"". Pure functions; thread-safe.
//
// Accepted fields (all optional except one of run/command, which a job with
// an image may leave out to run the image's own command):
//   name: string, 1-128 chars of [A-Za-z0-9._-]      (default "job")
//   run: string, a shell command run with /bin/sh -c
//   command: [string, ...], an argv list (non-empty); not both run and command
//   image: string, a container image: docker://REF, oci-archive:PATH,
//          docker-archive:PATH or oci:DIR[:TAG] (model/image_ref.h)
//   executor: sandbox | process | docker | podman   (default: the node's)
//           process cannot run an image; docker and podman need one
//   network: true (default): a network of its own with outbound
//           connectivity, no route to the machine's own services or other
//           jobs; false: no network, only a loopback of its own; "host":
//           the machine's network, where the provider's policy allows it
//   env: {NAME: string}   names match [A-Za-z_][A-Za-z0-9_]*; values are strings,
//                         numbers or booleans (converted to text)
//   resources:
//     gpus: whole GPUs, an integer 0..64; or a share of one GPU: a fraction
//           below 1 (0.5) or an amount ("500m", "0.25"), at most 3 decimals.
//           A fraction above 1 that is not whole (1.5) is rejected.
//     gpu_memory: size ("24GiB"), at most 1 TiB. Whole GPUs: the minimum
//           memory of each GPU. A share: the GPU memory the share takes
//           (reserved on its GPU); absent = no memory reservation.
//     gpu_models: [string] or a single string; allowed models (any if absent)
//     min_compute_capability: "MAJOR.MINOR" ("8.0") or a number (8.6)
//     node_labels: {name: value}; every one must match the node's labels
//     prefer: {models: [string], wait: duration (default 10m, at most 7d)}
//           preferred models, used alone until `wait` after submission
//     cpus: number ("2", 0.5, "500m"), at most 1024
//     memory: size, at most 64 TiB
//     disk: size, at most 1 PiB; what the work directory may hold
//     mig: a MIG profile "<N>g.<M>gb" ("3g.40gb"): one MIG instance with at
//           least N compute slices and M GB, taken whole. gpus absent (then 1)
//           or 1; not with a share or gpu_memory.
//     nodes: integer 1..256 (default 1); more than 1 asks for that many
//           distinct nodes at once (a gang, placed all or nothing), each
//           with all of the above: gpus, cpus, memory... are per node.
//           Whole GPUs only.
//   max_runtime: duration ("2h", "90s", or a number of seconds), at most 365d
//   max_cost: credits the job may spend in all (50, "12.50"); it is stopped,
//           checkpointing, once its charges reach it
//   priority: interactive | normal | opportunistic    (default normal)
//   group: the group (lab) whose share the job uses; same rules as name
//                                                     (default "default")
//   checkpoint: the job checkpoints, so it may be preempted (stopped and
//               requeued). Its own fields are optional:
//     interval: duration, 10s..7d; how often the agent asks for a
//           checkpoint (absent = only before vacating)
//     grace: duration, 1s..1h (default 30s); SIGTERM to SIGKILL on vacating
//     signal: SIGUSR1 (default), SIGUSR2, SIGHUP, SIGINT, SIGQUIT, SIGTERM,
//           SIGALRM, SIGWINCH (the "SIG" may be left out), or none
//   distributed: torch (default) | none; how the ranks of a multi-node job
//           relate: one PyTorch program with rendezvous variables (torch),
//           or independent replicas (none)
//   max_restarts: integer 0..100 (default 0); how many times a failed attempt
//           (exit non-zero, a failed rank) is requeued before the job fails
//   session: an interactive session (gpupool session start); its fields:
//     kind: shell (default) | jupyter
//     idle_timeout: duration (default 30m; 0 = never), at most 30d; the
//           session is stopped after this long without tunnel traffic
//     ports: [port, ...] (at most 32); the TCP ports tunnels may reach
//     any_port: true lets tunnels reach any port
//     jupyter_token: set by the server for Jupyter sessions
//     A session defaults to priority interactive, and without run or
//     command to its kind's command (DefaultSessionCommand).
//   workdir: path of a local directory (at most 4096 bytes); the gpupool CLI
//           uploads it (honouring .gpupoolignore) and sets `inputs`
//   inputs: the manifest id (64 lowercase hex digits) of an uploaded tree,
//           materialized as the job's work directory. The API requires it
//           whenever workdir is given: the server cannot read the client's files.
//
// Sizes are bounded (docs/user-guide.md, "Limits of a spec"): run 64 KiB;
// command 1024 arguments and 64 KiB in all; env 256 entries of values up to
// 32 KiB, 256 KiB in all; name and group 128 characters; model lists 32
// entries; node_labels 64. Errors name the field and the count: "env: at
// most 256 entries, got 300". JSON bodies are first read by
// ParseJsonObject (common/json_reader.h), which bounds nesting and strings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string_view>

#include "common/status.h"
#include "model/job.h"

namespace gpupool {

// Parses YAML (a superset of JSON, so JSON text works too).
Result<JobSpec> ParseJobSpec(std::string_view text);

// The size limits of a spec's largest fields.
struct SpecLimits {
  size_t run_bytes;
  size_t command_args;
  size_t command_bytes;  // all arguments together
  size_t env_vars;
  size_t env_value_bytes;
  size_t env_bytes;  // names and values together
};
// What a submission may have (docs/user-guide.md, "Limits of a spec").
inline constexpr SpecLimits kSubmitLimits{64 * 1024, 1024, 64 * 1024, 256, 32 * 1024, 256 * 1024};
// What a stored job may have: the limits of every earlier release, so that
// jobs accepted before the limits were tightened still load.
inline constexpr SpecLimits kStoredLimits{128 * 1024, 4096, SIZE_MAX, 1024, 128 * 1024, SIZE_MAX};

// From an already parsed JSON value (the API's request body).
Result<JobSpec> JobSpecFromJson(const nlohmann::json& j, const SpecLimits& limits = kSubmitLimits);

// What a session runs when its spec names no command: Jupyter on the
// socket the agent gives it, or a process that only keeps a shell session
// alive.
std::string DefaultSessionCommand(const SessionSpec& session);

// Canonical JSON form; JobSpecFromJson(JobSpecToJson(s)) == s.
nlohmann::json JobSpecToJson(const JobSpec& spec);

// Checks the invariants of an already built spec (used by the parsers and by
// code that builds specs directly, such as `gpupool submit -- cmd`).
Status ValidateJobSpec(const JobSpec& spec, const SpecLimits& limits = kSubmitLimits);

}  // namespace gpupool
