#!/usr/bin/env python3
"""A deterministic job that checkpoints: the pool's end-to-end tests use it.

    python3 counter.py --steps N --sleep SECONDS [--checkpoint-every K]
                       [--result FILE] [--record FILE] [--pad-bytes B] [--pad-change F]

Its state is (step, hash). It starts from step 0 and
h0 = sha256(b"gpupool").hexdigest(); step k = 1, 2, ..., N computes

    h_k = sha256(bytes.fromhex(h_{k-1}) + k.to_bytes(8, "big")).hexdigest()

so the final hash depends only on N, whether or not the run was interrupted
and resumed. Each step sleeps SECONDS first. After a step it checkpoints when
the pool asked for one (the checkpoint signal) or, with --checkpoint-every K,
when the step is a multiple of K. It resumes from the newest checkpoint in
the checkpoint directory ($GPUPOOL_CHECKPOINT_DIR, else ./checkpoints).

Output. Exactly one line on stdout, at the end:

    RESULT steps=<N> hash=<64 hex digits> resumed_from=<step restored, or 0>

and, with --result FILE, the file holds the single line
`steps=<N> hash=<hex>` (equal for interrupted and uninterrupted runs).
With --record FILE, every step appends `<attempt> <step> <uptime>` to FILE
(the attempt from $GPUPOOL_ATTEMPT_ID, the machine's /proc/uptime as a clock
that every process of the machine shares), flushed before the next step:
the chaos test reads it to catch two attempts running at once.
Progress goes to stderr, one line per event:

    counter: start at step 0 of N
    counter: resume at step S of N from ckpt-M
    counter: checkpoint ckpt-M at step S (requested|every K)

A checkpoint holds state.json ({"step", "hash", "pad_bytes",
"pad_change"}) and, with --pad-bytes B, pad.bin: B bytes of pseudo-random
data that are a function of B and the step alone. pad.bin is a fixed base
(SHAKE-256, generated once per run) in which one 4 KiB block is replaced in
about the fraction F (--pad-change, default 0.01) of its 64 KiB regions, the
blocks and their bytes chosen by the step. The blob store cuts files into
chunks of about 64 KiB, so successive checkpoints share all but about 2F of
their chunks and an incremental upload is small. The base is kept in memory
(B bytes) and every checkpoint writes the whole file from it. On resume the
restored pad.bin is compared with the content for its step, generated again
(exit 3 if it differs), which tests that the pool restored it byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sys
import time
from pathlib import Path

from gpupool_checkpoint import Checkpointer

BLOCK = 4096           # bytes replaced at once in pad.bin
REGION = 64 * 1024     # the blob store's average chunk size
PIECE = 64 * 1024 * 1024  # base generated in pieces of this size


def first_hash() -> str:
    return hashlib.sha256(b"gpupool").hexdigest()


def advance(h: str, step: int) -> str:
    """The hash after step `step` (1-based), from the hash before it."""
    return hashlib.sha256(bytes.fromhex(h) + step.to_bytes(8, "big")).hexdigest()


def hash_after(steps: int) -> str:
    """The hash after `steps` steps of an uninterrupted run."""
    h = first_hash()
    for k in range(1, steps + 1):
        h = advance(h, k)
    return h


class Pad:
    """pad.bin's content for any step: a base with a few 4 KiB blocks replaced."""

    def __init__(self, size: int, change: float) -> None:
        self.size = size
        self.base = bytearray(size)
        for i, offset in enumerate(range(0, size, PIECE)):
            n = min(PIECE, size - offset)
            self.base[offset:offset + n] = hashlib.shake_256(b"gpupool-pad/base/%d" % i).digest(n)
        self.blocks = size // BLOCK
        self.changed = min(self.blocks, max(1, math.ceil(change * size / REGION)))

    def _replaced(self, step: int) -> list[tuple[int, bytes]]:
        """(offset, bytes) of the blocks that differ from the base at `step`, by offset."""
        if self.blocks == 0:  # smaller than a block: all of it changes
            return [(0, hashlib.shake_256(b"gpupool-pad/%d/all" % step).digest(self.size))]
        chosen = sorted(random.Random(step).sample(range(self.blocks), self.changed))
        return [(b * BLOCK, hashlib.shake_256(b"gpupool-pad/%d/%d" % (step, b)).digest(BLOCK))
                for b in chosen]

    def _pieces(self, step: int):
        """The content for `step`, in order, as views of the base and replaced blocks."""
        base = memoryview(self.base)
        at = 0
        for offset, data in self._replaced(step):
            yield base[at:offset]
            yield memoryview(data)
            at = offset + len(data)
        yield base[at:]

    def write(self, path: Path, step: int) -> None:
        """Writes the content for `step` to `path`."""
        with open(path, "wb", buffering=0) as f:
            for view in self._pieces(step):
                while view:
                    view = view[f.write(view):]

    def matches(self, path: Path, step: int) -> bool:
        """True when `path` holds exactly the content for `step`."""
        if path.stat().st_size != self.size:
            return False
        with open(path, "rb", buffering=0) as f:
            for view in self._pieces(step):
                if f.read(len(view)) != view:
                    return False
        return True


def read_state(path: Path, pad: Pad | None) -> tuple[int, str, str, str]:
    """(step, hash, checkpoint name, why pad.bin is corrupt or "") from a checkpoint."""
    saved = json.loads((path / "state.json").read_text())
    step, corrupt = int(saved["step"]), ""
    if saved.get("pad_bytes"):
        if pad is None or pad.size != saved["pad_bytes"]:
            pad = Pad(saved["pad_bytes"], saved["pad_change"])
        if not pad.matches(path / "pad.bin", step):
            corrupt = f"{path / 'pad.bin'} is not the pad of step {step}: the restore is corrupt"
    return step, str(saved["hash"]), path.name, corrupt


def log(message: str) -> None:
    print(f"counter: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, required=True, help="steps in all (N)")
    parser.add_argument("--sleep", type=float, required=True, help="seconds before each step")
    parser.add_argument("--checkpoint-every", type=int, default=0, metavar="K",
                        help="also checkpoint after every K-th step (default: only on request)")
    parser.add_argument("--result", type=Path, help="also write 'steps=N hash=H' to this file")
    parser.add_argument("--record", type=Path,
                        help="append '<attempt> <step> <uptime>' to this file after every step")
    parser.add_argument("--pad-bytes", type=int, default=0, metavar="B",
                        help="add B bytes of pseudo-random data to each checkpoint")
    parser.add_argument("--pad-change", type=float, default=0.01, metavar="F",
                        help="fraction of pad.bin's 64 KiB regions changed per step (default 0.01)")
    args = parser.parse_args(argv)
    if args.steps < 0 or args.sleep < 0 or args.checkpoint_every < 0 or args.pad_bytes < 0:
        parser.error("--steps, --sleep, --checkpoint-every and --pad-bytes must not be negative")
    if not 0 <= args.pad_change <= 1:
        parser.error("--pad-change must be from 0 to 1")

    ckpt = Checkpointer()
    pad = Pad(args.pad_bytes, args.pad_change) if args.pad_bytes else None
    restored = ckpt.load(lambda path: read_state(path, pad))
    if restored is None:
        step, h = 0, first_hash()
        log(f"start at step 0 of {args.steps}")
    else:
        step, h, name, corrupt = restored
        if corrupt:
            log(corrupt)
            return 3
        log(f"resume at step {step} of {args.steps} from {name}")
    resumed_from = step
    attempt = os.environ.get("GPUPOOL_ATTEMPT_ID", "-")
    record = open(args.record, "a", buffering=1) if args.record is not None else None

    while step < args.steps:
        if args.sleep:
            time.sleep(args.sleep)
        step += 1
        h = advance(h, step)
        if record is not None:
            with open("/proc/uptime") as f:
                uptime = f.read().split()[0]
            record.write(f"{attempt} {step} {uptime}\n")
        every = args.checkpoint_every and step % args.checkpoint_every == 0
        if ckpt.requested() or every:
            why = "requested" if ckpt.requested() else f"every {args.checkpoint_every}"
            state = {"step": step, "hash": h, "pad_bytes": args.pad_bytes,
                     "pad_change": args.pad_change}

            def write(path: Path) -> None:
                if pad is not None:
                    pad.write(path / "pad.bin", step)
                (path / "state.json").write_text(json.dumps(state, sort_keys=True) + "\n")

            started = time.monotonic()
            committed = ckpt.save(write)
            log(f"checkpoint {committed.name} at step {step} ({why}; "
                f"written in {time.monotonic() - started:.2f} s)")

    if args.result is not None:
        args.result.write_text(f"steps={step} hash={h}\n")
    print(f"RESULT steps={step} hash={h} resumed_from={resumed_from}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
