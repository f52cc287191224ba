#!/usr/bin/env python3
"""A small PyTorch training job that checkpoints and resumes bit for bit.

    python3 train_torch.py [--steps N] [--sleep SECONDS] [--checkpoint-every K]
                           [--result FILE]

It trains a small MLP (with dropout) by Adam to imitate a fixed random
"teacher" network on synthetic batches, on the CPU, in one thread, with
deterministic algorithms. A checkpoint (written with torch.save through
gpupool_checkpoint) holds the step, the last loss, the model, the optimizer,
PyTorch's global random state (dropout) and the data generator's state, so a
run interrupted at any checkpoint and resumed ends with exactly the
parameters of an uninterrupted run.

It checkpoints when the pool asks (the checkpoint signal) and, with
--checkpoint-every K, after every K-th step, and resumes from the newest
checkpoint ($GPUPOOL_CHECKPOINT_DIR, else ./checkpoints).

Output. Exactly one line on stdout, at the end:

    RESULT steps=<N> loss=<repr of the last step's loss> params_sha256=<hex>

where params_sha256 is the SHA-256 of the raw bytes of every parameter,
concatenated in model.parameters() order. --result FILE writes the same line
without "RESULT ". Progress goes to stderr ("train: ..." lines).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path
from typing import Any

import torch

from gpupool_checkpoint import Checkpointer

SEED = 1234
IN, HIDDEN, OUT, BATCH = 16, 64, 4, 128


def log(message: str) -> None:
    print(f"train: {message}", file=sys.stderr, flush=True)


def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(), torch.nn.Dropout(0.1),
        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh(),
        torch.nn.Linear(HIDDEN, OUT))


def make_teacher() -> torch.nn.Module:
    """A fixed random network whose outputs are the targets."""
    torch.manual_seed(SEED + 1)
    teacher = torch.nn.Sequential(torch.nn.Linear(IN, 32), torch.nn.ReLU(), torch.nn.Linear(32, OUT))
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


def params_sha256(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="steps in all (default 300)")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds before each step")
    parser.add_argument("--checkpoint-every", type=int, default=0, metavar="K",
                        help="also checkpoint after every K-th step (default: only on request)")
    parser.add_argument("--result", type=Path, help="also write the result (without 'RESULT ') here")
    args = parser.parse_args(argv)
    if args.steps < 0 or args.sleep < 0 or args.checkpoint_every < 0:
        parser.error("--steps, --sleep and --checkpoint-every must not be negative")

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    teacher = make_teacher()
    torch.manual_seed(SEED)
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    data = torch.Generator().manual_seed(SEED + 2)
    step, loss = 0, float("nan")

    ckpt = Checkpointer()

    def read(path: Path) -> dict[str, Any]:
        # Our own file, so unpickling it is safe; the optimizer state holds
        # plain floats, which weights_only=True rejects in older PyTorch.
        return torch.load(path / "state.pt", weights_only=False)

    saved = ckpt.load(read)
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["torch_rng"])
        data.set_state(saved["data_rng"])
        step, loss = int(saved["step"]), float(saved["loss"])
        log(f"resume at step {step} of {args.steps}")
    else:
        log(f"start at step 0 of {args.steps}")

    model.train()
    while step < args.steps:
        if args.sleep:
            time.sleep(args.sleep)
        x = torch.randn(BATCH, IN, generator=data)
        y = teacher(x) + 0.01 * torch.randn(BATCH, OUT, generator=data)
        optimizer.zero_grad(set_to_none=True)
        batch_loss = torch.nn.functional.mse_loss(model(x), y)
        batch_loss.backward()
        optimizer.step()
        step += 1
        loss = batch_loss.item()

        every = args.checkpoint_every and step % args.checkpoint_every == 0
        if ckpt.requested() or every:
            state = {
                "step": step,
                "loss": loss,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "data_rng": data.get_state(),
            }
            committed = ckpt.save(lambda path: torch.save(state, path / "state.pt"))
            log(f"checkpoint {committed.name} at step {step}, loss {loss:.6f}")

    line = f"steps={step} loss={loss!r} params_sha256={params_sha256(model)}"
    if args.result is not None:
        args.result.write_text(line + "\n")
    print(f"RESULT {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
