// The docker / podman command lines of the `docker` and `podman` executors:
// for a provider that runs a container engine with the NVIDIA container
// toolkit, a task is one container, run in the foreground by the task's shim
// (`<engine> run ...` is the LaunchPlan's argv), signalled with `kill`,
// inspected for its end (OOM kill, exit code) and then removed.
//
// Pure command builders: argv vectors, never shell text, so values with
// spaces, quotes or '=' stay one argument. Thread-safe, no I/O.
//
// What the container gets (ContainerRunCommand):
//   name        gpupool-<attempt id>, label gpupool.attempt=<attempt id>
//   process     --init (a real pid 1 that reaps and forwards signals); stdin
//               closed (no -i), no tty; not --rm: the shim reads the
//               container's state after it ended, then removes it
//   image       pulled when missing (--pull missing); docker:// references
//               only: archives and OCI layouts must be loaded into the
//               engine first, which gpupool does not do
//   user        --user <uid>:<gid> when the task has its own account
//   privileges  --cap-drop ALL, --security-opt no-new-privileges
//   network     --network none for a job with `network: false`
//   limits      --memory and --memory-swap equal (no swap), --cpus,
//               --pids-limit; nothing for a 0 (no) limit. The disk limit is
//               not the engine's: /work is a host directory, and the
//               writable layer is not limited.
//   GPUs        gpu_mode "cdi": --device nvidia.com/gpu=<uuid> per GPU
//               (docker 25+ with its CDI feature enabled, or podman). The
//               CDI spec must name GPUs by UUID: current `nvidia-ctk cdi
//               generate` names them by index and UUID; with an older
//               toolkit, add --device-name-strategy=uuid;
//               "gpus": docker's --gpus "device=<uuid>,<uuid>" (the inner
//               quotes are part of the value: docker reads it as CSV, and
//               without them the comma splits the list) or, for podman
//               (whose --gpus is CDI shorthand), --gpus <uuid> per GPU.
//               NVIDIA_VISIBLE_DEVICES is always set by gpupool, never by
//               the job: to the UUIDs for docker's --gpus, else "void", so
//               that a toolkit runtime configured as the default cannot
//               give an image's NVIDIA_VISIBLE_DEVICES=all every GPU.
//               The agent's gpu_driver_dir (exec/exec_config.h) does not
//               apply here: the engine's NVIDIA toolkit injects the host's
//               driver into the container, and gpupool leaves that alone.
//               Nor is libgpushare.so injected (exec/gpu_share.h): a share
//               of a GPU run by docker or podman has no memory cap of
//               gpupool's yet.
//   work dir    -v <work_dir>:/work read-write. The working directory is
//               /work (-w /work) when the task has a command of its own,
//               as in every other executor; a task that runs the image's
//               own entrypoint and command keeps the image's WORKDIR.
//   environment the task's env as -e KEY=VALUE, except what names host
//               paths or would override the image's own: PATH and SHELL are
//               dropped (the image's apply), HOME, TMPDIR and
//               GPUPOOL_WORK_DIR are /work.
//   extra_args  the provider's, last before the image, so they can add to
//               or override gpupool's flags
//   command     the task's argv after the image (a command replaces the
//               image's CMD, keeping its ENTRYPOINT); a shell `run` is
//               --entrypoint /bin/sh IMAGE -c "...", replacing both, as in
//               the sandbox; none: the image's default
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "exec/executor.h"

namespace gpupool::exec {

// Where the job's work directory is inside the container.
inline constexpr const char* kContainerWorkDir = "/work";

struct ContainerOptions {
  std::string engine = "docker";        // "docker" or "podman", or a path to either
  std::string gpu_mode = "cdi";         // "cdi" or "gpus"; see above
  std::vector<std::string> extra_args;  // provider-given, inserted before the image
  friend bool operator==(const ContainerOptions&, const ContainerOptions&) = default;
};

// "gpupool-<attempt id>" with every character other than letters, digits,
// '_' and '-' (the '.' of "12.1") turned into '-': "gpupool-12-1".
std::string ContainerName(const std::string& attempt_id);

// The `<engine> run ...` argv for the task (see above). InvalidArgument when
// the task cannot run in a container: no image, a malformed reference
// (model/image_ref.h) or not a docker:// image
// ("only docker:// images can run with docker: load oci-archive:... into
// the engine and name it by docker:// reference, or use the sandbox
// executor"), an unknown gpu_mode, a work directory that is not an
// absolute path without ':' or ',', or an env entry without "KEY=".
Result<std::vector<std::string>> ContainerRunCommand(const ContainerOptions& o,
                                                     const TaskContext& task);

// `<engine> kill --signal <SIGNAME> <name>` ("SIGTERM"; the number for a
// signal without a name).
std::vector<std::string> ContainerKillCommand(const ContainerOptions& o,
                                              const std::string& attempt_id, int sig);

// `<engine> rm -f <name>`: removes the container, stopping it if needed.
std::vector<std::string> ContainerRemoveCommand(const ContainerOptions& o,
                                                const std::string& attempt_id);

// `<engine> inspect --format '{{.State.OOMKilled}} {{.State.ExitCode}}'
// <name>`, which prints e.g. "true 137".
std::vector<std::string> ContainerInspectCommand(const ContainerOptions& o,
                                                 const std::string& attempt_id);

}  // namespace gpupool::exec
