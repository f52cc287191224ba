#!/usr/bin/env python3
"""A small deterministic PyTorch DDP training that checkpoints and resumes bit for bit.

    python3 train_ddp.py [--steps N] [--checkpoint-every K] [--sleep S] [...]

One process per rank, started by the pool (resources.nodes: N, distributed:
torch), by torchrun, or by hand: it reads the variables torchrun sets
(MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK) and joins a gloo process group
on the CPU. Without WORLD_SIZE it runs alone (a group of one).

What it trains. An MLP learns by Adam to imitate a fixed random "teacher"
network, through DistributedDataParallel (the gradients are averaged over
the ranks), in one thread per rank with deterministic algorithms. Each rank's batch at a step is drawn
from a generator seeded with (seed, step, rank) only, so the result depends on
neither when the run was interrupted nor on timing: a run resumed from any
checkpoint ends with exactly the parameters of an uninterrupted one, as long
as the number of ranks is the same.

Checkpoints (docs/checkpoints.md). After every K-th step (--checkpoint-every)
and when any rank got the checkpoint signal ($GPUPOOL_CHECKPOINT_SIGNAL,
SIGUSR1 by default), all ranks checkpoint after the same step: each step
ends with one all_reduce of [loss, signal flag], so a signal that reaches
the ranks at different moments still makes them agree. The state (model,
optimizer, step) is written to a hidden staging directory, then renamed to
ckpt-<step> in $GPUPOOL_CHECKPOINT_DIR (./checkpoints outside the pool), and
older commits are deleted; then all ranks meet at a barrier. Rank 0 always
commits; another rank commits too when its directory is its own (in the pool
every rank has one, and its agent then sees the commit it asked for), but not
when it shares rank 0's (two processes on one machine, torchrun).

On start every rank reads the newest ckpt-<N> of its own directory. When all
ranks found the same step they resume from it; when they disagree (a rank
without a checkpoint), rank 0's state is sent to all. GPUPOOL_RESTORED=1
without a checkpoint is an error.

Output (stdout; every rank prints "train_ddp: ..." progress lines). At the
end rank 0 prints one line

    GPUPOOL_DDP_FINAL {"steps": N, "world_size": W, "params_sha256": H,
                       "param_count": C, "params": [...], "median_step_ms": M, ...}

where params is every parameter flattened in model.parameters() order
("%.9g", which round-trips float32; null when there are more than
--print-params values, to keep the line short), and params_sha256 the
SHA-256 of their raw float32 bytes. Every rank prints its median step time
(forward, backward with the gradient all-reduce, optimizer step and the
agreement all-reduce; not the --sleep nor checkpoint writing).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def parse_signal(name: str) -> signal.Signals | None:
    if name.lower() == "none":
        return None
    name = name.upper()
    return signal.Signals[name if name.startswith("SIG") else "SIG" + name]


# Checkpoint requests are counted from the first moment: the pool may ask
# while torch is still being imported (seconds on a busy machine), and an
# uncaught SIGUSR1 would end the job.
REQUESTS = [0]
_SIGNAL = parse_signal(os.environ.get("GPUPOOL_CHECKPOINT_SIGNAL", "SIGUSR1"))
if _SIGNAL is not None:
    signal.signal(_SIGNAL, lambda signum, frame: REQUESTS.__setitem__(0, REQUESTS[0] + 1))

import torch  # noqa: E402  (after the handler, on purpose)
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

COMMITTED = re.compile(r"ckpt-(0|[1-9][0-9]*)")
STAGING_PREFIX = ".staging-"


def log(message: str) -> None:
    print(f"train_ddp: {message}", flush=True)


# ---- the model and the data ------------------------------------------------

def make_model(args: argparse.Namespace) -> torch.nn.Module:
    torch.manual_seed(args.seed)
    layers: list[torch.nn.Module] = []
    width = args.in_dim
    for _ in range(args.layers):
        layers += [torch.nn.Linear(width, args.hidden), torch.nn.Tanh()]
        width = args.hidden
    layers.append(torch.nn.Linear(width, args.out_dim))
    return torch.nn.Sequential(*layers)


def make_teacher(args: argparse.Namespace) -> torch.nn.Module:
    """A fixed random network whose outputs are the targets."""
    torch.manual_seed(args.seed + 1)
    teacher = torch.nn.Sequential(torch.nn.Linear(args.in_dim, 16), torch.nn.ReLU(),
                                  torch.nn.Linear(16, args.out_dim))
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


def batch(args: argparse.Namespace, teacher: torch.nn.Module, step: int, rank: int
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s batch at `step` (0-based): a function of (seed, step, rank) only."""
    generator = torch.Generator().manual_seed(
        (args.seed * 1_000_003 + step * 4099 + rank) % (2**63 - 1))
    x = torch.randn(args.batch, args.in_dim, generator=generator)
    y = teacher(x) + 0.01 * torch.randn(args.batch, args.out_dim, generator=generator)
    return x, y


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])


# ---- checkpoints -------------------------------------------------------------

def committed(directory: Path) -> list[tuple[int, Path]]:
    """The committed checkpoints (directories ckpt-<N>), by N."""
    found = []
    for entry in os.scandir(directory):
        m = COMMITTED.fullmatch(entry.name)
        if m and entry.is_dir(follow_symlinks=False):
            found.append((int(m.group(1)), Path(entry.path)))
    return sorted(found)


def commit(directory: Path, step: int, state: dict[str, Any], flush: bool) -> Path:
    """Writes `state` as ckpt-<step> by the commit-by-rename contract, deletes older ones."""
    staging = directory / f"{STAGING_PREFIX}{os.getpid()}-{step}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    torch.save(state, staging / "state.pt")
    if flush:  # outside the pool nothing else keeps it: flush file, directory
        for path in (staging / "state.pt", staging):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    final = directory / f"ckpt-{step}"
    os.rename(staging, final)
    if flush:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for number, path in committed(directory):
        if number < step:  # hide first (atomic), then delete
            doomed = directory / f"{STAGING_PREFIX}{os.getpid()}-old-{number}"
            try:
                os.rename(path, doomed)
            except OSError:
                continue
            shutil.rmtree(doomed, ignore_errors=True)
    return final


def clean_staging(directory: Path) -> None:
    """Removes staging directories a killed run of this rank left behind."""
    for entry in os.scandir(directory):
        if entry.name.startswith(STAGING_PREFIX):
            m = re.match(r"\.staging-(\d+)-", entry.name)
            if m and int(m.group(1)) != os.getpid():
                try:
                    os.kill(int(m.group(1)), 0)
                    continue  # a live process's (a rank sharing the directory)
                except ProcessLookupError:
                    pass
                except PermissionError:
                    continue
            shutil.rmtree(entry.path, ignore_errors=True)


def read_state(path: Path) -> dict[str, Any]:
    # Our own file: unpickling it is safe (the optimizer state holds plain
    # numbers, which weights_only=True rejects in older PyTorch).
    return torch.load(path / "state.pt")


# ---- the run ------------------------------------------------------------------

def init_group(timeout_s: float) -> tuple[int, int]:
    timeout = datetime.timedelta(seconds=timeout_s)
    if "WORLD_SIZE" not in os.environ:  # alone: a group of one on a free port
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                                world_size=1, timeout=timeout)
    else:  # MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK: the pool's or torchrun's
        dist.init_process_group("gloo", init_method="env://", timeout=timeout)
    return dist.get_rank(), dist.get_world_size()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="steps in all (default 200)")
    parser.add_argument("--checkpoint-every", type=int, default=0, metavar="K",
                        help="checkpoint after every K-th step (default: only on the signal)")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep before each step")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--batch", type=int, default=32, help="samples per rank and step (default 32)")
    parser.add_argument("--in-dim", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--layers", type=int, default=2, help="hidden layers (default 2)")
    parser.add_argument("--out-dim", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds a collective may wait for a peer (default 120)")
    parser.add_argument("--print-params", type=int, default=2000, metavar="MAX",
                        help="list the parameters in the final line up to MAX values (default 2000)")
    parser.add_argument("--log-every", type=int, default=0, metavar="K",
                        help="print the loss every K steps (default: steps/10)")
    parser.add_argument("--checkpoint-dir", type=Path, default=Path("checkpoints"),
                        help="outside the pool (default ./checkpoints); $GPUPOOL_CHECKPOINT_DIR wins")
    args = parser.parse_args(argv)
    if min(args.steps, args.checkpoint_every, args.batch, args.layers) < 0 or args.sleep < 0:
        parser.error("negative numbers are not allowed")

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)

    in_pool = bool(os.environ.get("GPUPOOL_CHECKPOINT_DIR"))
    directory = Path(os.environ.get("GPUPOOL_CHECKPOINT_DIR") or args.checkpoint_dir).absolute()
    directory.mkdir(parents=True, exist_ok=True)
    requests = REQUESTS  # counted since the start (above)

    rank, world = init_group(args.timeout)
    log(f"rank {rank} of {world}, master {os.environ.get('MASTER_ADDR', '-')}:"
        f"{os.environ.get('MASTER_PORT', '-')}, checkpoints in {directory}"
        + (", restored" if os.environ.get("GPUPOOL_RESTORED") == "1" else ""))

    # Who commits: rank 0, and each rank whose directory no lower rank shares.
    st = directory.stat()
    keys: list[Any] = [None] * world
    dist.all_gather_object(keys, (socket.gethostname(), st.st_dev, st.st_ino))
    commits = keys.index(keys[rank]) == rank
    if commits:
        clean_staging(directory)

    teacher = make_teacher(args)
    model = make_model(args)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    # Resume: every rank from its own newest checkpoint, if all agree.
    found = committed(directory)
    if os.environ.get("GPUPOOL_RESTORED") == "1" and not found:
        raise FileNotFoundError(f"GPUPOOL_RESTORED=1 but {directory} holds no ckpt-<N>")
    local_step = found[-1][0] if found else 0
    steps: list[Any] = [None] * world
    dist.all_gather_object(steps, local_step)
    state: dict[str, Any] | None = None
    if all(s == steps[0] for s in steps):
        if local_step > 0:
            state = read_state(found[-1][1])
    else:
        log(f"ranks found different checkpoints (steps {steps}): using rank 0's")
        holder: list[Any] = [read_state(found[-1][1]) if rank == 0 and found else None]
        dist.broadcast_object_list(holder, src=0)
        state = holder[0]
        if commits:  # commits numbered above the step resumed from would shadow ours
            resumed = int(state["step"]) if state is not None else 0
            for number, path in found:
                if number > resumed:
                    shutil.rmtree(path, ignore_errors=True)
    step = 0
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])
        log(f"resumed from step {step} of {args.steps}")
    else:
        log(f"start at step 0 of {args.steps}")
    last_commit = step

    ddp = DistributedDataParallel(model)  # broadcasts rank 0's parameters
    log_every = args.log_every or max(1, args.steps // 10)
    times: list[float] = []
    served = 0
    while step < args.steps:
        if args.sleep:
            time.sleep(args.sleep)
        began = time.perf_counter()
        x, y = batch(args, teacher, step, rank)
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()  # averages the gradients over the ranks
        optimizer.step()
        step += 1
        pending = requests[0]
        agree = torch.tensor([loss.item(), 1.0 if pending > served else 0.0], dtype=torch.float64)
        dist.all_reduce(agree)  # the mean loss, and whether any rank was asked
        times.append(time.perf_counter() - began)
        mean_loss = agree[0].item() / world
        if step % log_every == 0 or step == args.steps:
            log(f"step {step} loss {mean_loss:.6f}")

        every = args.checkpoint_every and step % args.checkpoint_every == 0
        if (every or agree[1].item() > 0) and step > last_commit:
            served = pending
            if commits:
                state = {"step": step, "model": model.state_dict(),
                         "optimizer": optimizer.state_dict(), "world_size": world}
                commit(directory, step, state, flush=not in_pool)
            dist.barrier()
            last_commit = step
            log(f"checkpoint ckpt-{step} at step {step}"
                + ("" if commits else " (written by a rank sharing this directory)")
                + ("" if every else " (requested)"))

    # Trained: a checkpoint signal has nothing left to ask for. Ignored from
    # here on, since at exit Python puts back the default action of every
    # signal it handled, which for SIGUSR1 ends the process: the pool's
    # periodic checkpoint signal, arriving during the teardown, would fail
    # a job that had finished.
    if _SIGNAL is not None:
        signal.signal(_SIGNAL, signal.SIG_IGN)
    median_ms = statistics.median(times) * 1000 if times else 0.0
    log(f"median step time {median_ms:.3f} ms over {len(times)} steps")
    if rank == 0:
        values = flat_params(model)
        digest = hashlib.sha256(values.numpy().tobytes()).hexdigest()
        result = {"steps": step, "world_size": world, "params_sha256": digest,
                  "param_count": values.numel(),
                  "params": ([float(f"{v:.9g}") for v in values.tolist()]
                             if values.numel() <= args.print_params else None),
                  "param_sum": float(values.double().sum()),
                  "median_step_ms": round(median_ms, 4), "timed_steps": len(times)}
        print("GPUPOOL_DDP_FINAL " + json.dumps(result, separators=(",", ":")), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
