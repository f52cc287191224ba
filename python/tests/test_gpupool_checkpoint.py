"""Tests of python/gpupool_checkpoint.py and of the example jobs that use it
(examples/checkpointing/): the commit-by-rename contract, signals, crashes in
the middle of a save, restores, and interrupted example runs that must end
exactly like uninterrupted ones.

    /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests
"""
from __future__ import annotations

import filecmp
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

sys.dont_write_bytecode = True  # keep the source tree clean
REPO = Path(__file__).resolve().parents[2]
HELPER = REPO / "python" / "gpupool_checkpoint.py"
EXAMPLES = REPO / "examples" / "checkpointing"
COUNTER = EXAMPLES / "counter.py"
TRAIN = EXAMPLES / "train_torch.py"
sys.path.insert(0, str(HELPER.parent))

import gpupool_checkpoint as gc  # noqa: E402
from gpupool_checkpoint import Checkpointer  # noqa: E402

COUNTER_RESULT = re.compile(r"RESULT steps=(\d+) hash=([0-9a-f]{64}) resumed_from=(\d+)")
TRAIN_RESULT = re.compile(r"RESULT steps=(\d+) loss=(\S+) params_sha256=([0-9a-f]{64})")


@pytest.fixture(autouse=True)
def no_pool_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("GPUPOOL_"):
            monkeypatch.delenv(name)


@pytest.fixture
def pool_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkpoint directory as the agent provides it."""
    d = tmp_path / "work" / ".checkpoints"
    d.mkdir(parents=True)
    monkeypatch.setenv(gc.ENV_DIR, str(d))
    monkeypatch.setenv(gc.ENV_SIGNAL, "SIGUSR1")
    return d


@pytest.fixture
def make() -> Iterator:
    """Checkpointer(...) that puts the signal handler back after the test."""
    made: list[Checkpointer] = []

    def new(*args, **kwargs) -> Checkpointer:
        c = Checkpointer(*args, **kwargs)
        made.append(c)
        return c

    yield new
    for c in reversed(made):
        c.close()


def names(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def write_text(text: str):
    def write(path: Path) -> None:
        (path / "data.txt").write_text(text)
        (path / "sub").mkdir()
        (path / "sub" / "more.txt").write_text(text * 2)
    return write


# --- the helper --------------------------------------------------------------


def test_save_commits_numbered_directories_and_prunes_to_keep(pool_dir: Path, make) -> None:
    ckpt = make(keep=2)
    assert ckpt.in_pool and ckpt.directory == pool_dir
    assert ckpt.latest() is None and not ckpt.restored
    paths = [ckpt.save(write_text(f"v{i}")) for i in range(1, 4)]
    assert [p.name for p in paths] == ["ckpt-1", "ckpt-2", "ckpt-3"]
    assert names(pool_dir) == ["ckpt-2", "ckpt-3"]  # no staging left, ckpt-1 pruned
    assert ckpt.latest() == pool_dir / "ckpt-3"
    assert (pool_dir / "ckpt-3" / "data.txt").read_text() == "v3"
    assert (pool_dir / "ckpt-3" / "sub" / "more.txt").read_text() == "v3v3"
    assert ckpt.load(lambda p: (p / "data.txt").read_text()) == "v3"


def test_save_json_and_load_json(pool_dir: Path, make) -> None:
    ckpt = make()
    assert ckpt.load_json() is None
    ckpt.save_json({"step": 7, "hash": "ab"})
    ckpt.save_json({"step": 9, "hash": "cd"})
    assert names(pool_dir) == ["ckpt-2"]
    assert ckpt.load_json() == {"step": 9, "hash": "cd"}
    assert json.loads((pool_dir / "ckpt-2" / "state.json").read_text())["step"] == 9


def test_every_file_and_directory_is_fsynced_before_the_rename(
        pool_dir: Path, make, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    real_rename = os.rename
    renamed: list[tuple[str, list[str]]] = []

    def rename(src, dst) -> None:
        renamed.append((str(dst), list(synced)))
        real_rename(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    ckpt = make(fsync=True)
    committed = ckpt.save(write_text("x"))
    (final, synced_before), = renamed
    assert final == str(committed)
    staging = Path(synced_before[-1])
    assert staging.parent == pool_dir and staging.name.startswith(".staging-")
    assert sorted(synced_before) == sorted(
        [str(staging / "data.txt"), str(staging / "sub" / "more.txt"), str(staging / "sub"), str(staging)])
    assert synced[-1] == str(pool_dir)  # the rename itself made durable


def test_in_the_pool_nothing_is_fsynced_unless_asked(
        pool_dir: Path, make, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    ckpt = make()
    assert ckpt.in_pool and not ckpt.fsync
    ckpt.save(write_text("x"))
    assert synced == []
    assert make(fsync=True).fsync
    monkeypatch.delenv(gc.ENV_DIR)
    outside = make(tmp_path / "mine")
    assert not outside.in_pool and outside.fsync
    outside.save(write_text("y"))
    assert synced  # outside the pool a checkpoint is flushed by default


def test_numbering_ignores_everything_but_committed_directories(pool_dir: Path, make) -> None:
    (pool_dir / "ckpt-3").mkdir()
    (pool_dir / "ckpt-3" / "state.json").write_text("{}")
    (pool_dir / "ckpt-05").mkdir()            # leading zero: not a commit
    (pool_dir / "ckpt-x").mkdir()
    (pool_dir / "ckpt-9").write_text("a file")  # not a directory
    (pool_dir / "ckpt-12").symlink_to(pool_dir / "ckpt-3")  # a link, not a directory
    (pool_dir / ".hidden-ckpt-20").mkdir()
    ckpt = make(keep=5)
    assert ckpt.latest() == pool_dir / "ckpt-3"
    assert ckpt.save(write_text("y")).name == "ckpt-4"


def test_a_signal_requests_a_checkpoint_and_save_serves_it(pool_dir: Path, make) -> None:
    ckpt = make()
    assert ckpt.signal == signal.SIGUSR1
    assert not ckpt.requested()
    os.kill(os.getpid(), signal.SIGUSR1)
    assert ckpt.requested()
    ckpt.save_json({"a": 1})
    assert not ckpt.requested()
    ckpt.request()
    assert ckpt.requested()


def test_a_signal_during_save_stays_pending(pool_dir: Path, make) -> None:
    ckpt = make()
    os.kill(os.getpid(), signal.SIGUSR1)

    def write(path: Path) -> None:
        (path / "a").write_text("a")
        os.kill(os.getpid(), signal.SIGUSR1)  # the state being written predates it
        (path / "b").write_text("b")

    committed = ckpt.save(write)
    assert names(committed) == ["a", "b"]
    assert ckpt.requested()
    ckpt.save(write_text("newer"))
    assert not ckpt.requested()


def test_the_signal_comes_from_the_environment_in_the_pool(
        pool_dir: Path, make, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gc.ENV_SIGNAL, "SIGUSR2")
    ckpt = make(signal="SIGHUP")  # only used outside the pool
    assert ckpt.signal == signal.SIGUSR2
    os.kill(os.getpid(), signal.SIGUSR2)
    assert ckpt.requested()
    ckpt.close()
    monkeypatch.setenv(gc.ENV_SIGNAL, "none")
    before = signal.getsignal(signal.SIGUSR1)
    quiet = make()
    assert quiet.signal is None and signal.getsignal(signal.SIGUSR1) is before
    assert not quiet.requested()
    monkeypatch.setenv(gc.ENV_SIGNAL, "SIGNOPE")
    with pytest.raises(ValueError, match="SIGNOPE"):
        make()


def test_close_puts_the_previous_handler_back(pool_dir: Path) -> None:
    before = signal.getsignal(signal.SIGUSR1)
    with Checkpointer() as ckpt:
        assert signal.getsignal(signal.SIGUSR1) == ckpt._on_signal
    assert signal.getsignal(signal.SIGUSR1) is before


def test_a_failing_write_commits_nothing_and_keeps_the_request(pool_dir: Path, make) -> None:
    ckpt = make()
    first = ckpt.save_json({"step": 1})
    ckpt.request()

    def write(path: Path) -> None:
        (path / "half").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        ckpt.save(write)
    assert names(pool_dir) == [first.name]
    assert ckpt.requested()
    assert ckpt.save_json({"step": 2}).name == "ckpt-2"


def test_keep_must_be_positive(pool_dir: Path) -> None:
    with pytest.raises(ValueError, match="keep"):
        Checkpointer(keep=0)


KILLED_WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from gpupool_checkpoint import Checkpointer
    ckpt = Checkpointer()
    ckpt.save_json({"step": 1})
    def write(path):
        (path / "big.bin").write_bytes(b"x" * 100000)
        print("writing", flush=True)
        time.sleep(60)
    ckpt.save(write)
""")


def test_a_run_killed_while_saving_leaves_only_complete_checkpoints(pool_dir: Path, make) -> None:
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(HELPER.parent)],
                             stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert child.stdout is not None and child.stdout.readline() == "writing\n"
    finally:
        child.kill()
        child.wait()
    left = names(pool_dir)
    assert len(left) == 2 and left[0].startswith(".staging-") and left[1] == "ckpt-1", left
    assert (pool_dir / left[0] / "big.bin").exists()  # the half-written one, hidden
    ckpt = make()  # the next run cleans up after the dead one
    assert names(pool_dir) == ["ckpt-1"]
    assert ckpt.load_json() == {"step": 1}
    assert ckpt.save_json({"step": 2}).name == "ckpt-2"


def test_staging_of_a_live_process_is_left_alone(pool_dir: Path, make) -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        live = pool_dir / f".staging-{sleeper.pid}-1"
        dead = pool_dir / ".staging-999999999-1"
        odd = pool_dir / ".staging-whatever"
        for d in (live, dead, odd):
            d.mkdir()
        make()
        assert names(pool_dir) == [live.name]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_restored_attempt_continues_the_numbering(
        pool_dir: Path, make, monkeypatch: pytest.MonkeyPatch) -> None:
    # What the agent restores: only the newest checkpoint, as uploaded.
    (pool_dir / "ckpt-7").mkdir()
    (pool_dir / "ckpt-7" / "state.json").write_text('{"step": 70}')
    monkeypatch.setenv(gc.ENV_RESTORED, "1")
    ckpt = make()
    assert ckpt.restored
    assert ckpt.load_json() == {"step": 70}
    assert ckpt.save_json({"step": 71}).name == "ckpt-8"
    assert names(pool_dir) == ["ckpt-8"]


def test_restored_without_a_checkpoint_is_an_error(
        pool_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gc.ENV_RESTORED, "1")
    before = signal.getsignal(signal.SIGUSR1)
    with pytest.raises(FileNotFoundError, match="GPUPOOL_RESTORED=1"):
        Checkpointer()
    assert signal.getsignal(signal.SIGUSR1) is before


def test_outside_the_pool_the_scripts_directory_is_used(
        tmp_path: Path, make, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ckpt = make()
    assert not ckpt.in_pool
    assert ckpt.directory == tmp_path / "checkpoints" and ckpt.directory.is_dir()
    assert ckpt.signal == signal.SIGUSR1
    ckpt.save_json({"n": 1})
    ckpt.close()
    again = make()  # a second run on the laptop resumes
    assert again.restored and again.load_json() == {"n": 1}
    again.close()
    custom = make(dir="runs/exp1", keep=3, signal="none")
    assert custom.directory == tmp_path / "runs" / "exp1" and custom.signal is None
    # The pool's directory wins over the script's.
    monkeypatch.setenv(gc.ENV_DIR, str(tmp_path / "pool"))
    assert make(dir="runs/exp1").directory == tmp_path / "pool"


def test_the_examples_copy_of_the_helper_is_identical() -> None:
    copy = EXAMPLES / "gpupool_checkpoint.py"
    assert filecmp.cmp(HELPER, copy, shallow=False), \
        f"{copy} differs from {HELPER}: run cp {HELPER} {copy}"


# --- the example jobs ---------------------------------------------------------


def job_env(checkpoint_dir: Path, restored: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_")}
    env.update(PYTHONDONTWRITEBYTECODE="1", GPUPOOL_CHECKPOINT_DIR=str(checkpoint_dir),
               GPUPOOL_CHECKPOINT_SIGNAL="SIGUSR1", GPUPOOL_JOB_ID="1", GPUPOOL_ATTEMPT_ID="1.1")
    if restored:
        env["GPUPOOL_RESTORED"] = "1"
    return env


def run_job(script: Path, args: list[str], checkpoint_dir: Path, restored: bool = False,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, str(script), *args], env=job_env(checkpoint_dir, restored),
                          cwd=cwd or checkpoint_dir.parent, capture_output=True, text=True,
                          timeout=120)


def kill_after_checkpoint(script: Path, args: list[str], checkpoint_dir: Path,
                          signal_at: str | None = None) -> int:
    """Runs the job until it commits a checkpoint (first sending SIGUSR1 when
    stderr shows `signal_at`), SIGKILLs it and returns the number of the last
    checkpoint committed (ckpt-<N>)."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    job = subprocess.Popen([sys.executable, str(script), *args], env=job_env(checkpoint_dir),
                           cwd=checkpoint_dir.parent, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert job.stderr is not None
        for line in job.stderr:
            if signal_at and signal_at in line:
                job.send_signal(signal.SIGUSR1)
            m = re.search(r"checkpoint ckpt-(\d+) at step", line)
            if m:
                job.kill()
                break
        else:
            pytest.fail(f"no checkpoint before the job ended: {job.communicate()}")
    finally:
        job.kill()
        out, _ = job.communicate()
    assert "RESULT" not in out, "the job ended before it was killed"
    return int(m.group(1))


def counter_result(out: str) -> tuple[str, str, int]:
    lines = out.splitlines()
    assert len(lines) == 1, out
    m = COUNTER_RESULT.fullmatch(lines[0])
    assert m, out
    return m.group(1), m.group(2), int(m.group(3))


def test_counter_hash_follows_its_documented_formula(tmp_path: Path) -> None:
    import hashlib
    h = hashlib.sha256(b"gpupool").hexdigest()
    for k in range(1, 26):
        h = hashlib.sha256(bytes.fromhex(h) + k.to_bytes(8, "big")).hexdigest()
    r = run_job(COUNTER, ["--steps", "25", "--sleep", "0", "--result", str(tmp_path / "r.txt")],
                tmp_path / "ck")
    assert r.returncode == 0, r.stderr
    assert counter_result(r.stdout) == ("25", h, 0)
    assert (tmp_path / "r.txt").read_text() == f"steps=25 hash={h}\n"


@pytest.mark.parametrize("how", ["every", "signal"])
def test_counter_killed_and_restored_ends_like_an_uninterrupted_run(tmp_path: Path, how: str) -> None:
    steps = 300
    plain = run_job(COUNTER, ["--steps", str(steps), "--sleep", "0"], tmp_path / "plain" / "ck")
    assert plain.returncode == 0, plain.stderr
    want_steps, want_hash, resumed = counter_result(plain.stdout)
    assert resumed == 0

    ck = tmp_path / "run" / "ck"
    args = ["--steps", str(steps), "--sleep", "0.01"]
    if how == "every":
        number = kill_after_checkpoint(COUNTER, args + ["--checkpoint-every", "7"], ck)
    else:
        number = kill_after_checkpoint(COUNTER, args, ck, signal_at="start at step 0")
    assert names(ck) == [f"ckpt-{number}"]
    saved = json.loads((ck / f"ckpt-{number}" / "state.json").read_text())

    again = run_job(COUNTER, args, ck, restored=True)
    assert again.returncode == 0, again.stderr
    assert counter_result(again.stdout) == (want_steps, want_hash, saved["step"])
    assert saved["step"] > 0
    assert f"resume at step {saved['step']} of {steps} from ckpt-{number}" in again.stderr


def test_counter_pad_is_a_function_of_the_step_and_verified_on_restore(tmp_path: Path) -> None:
    pad = str(1024 * 1024 + 100)  # 256 blocks and a partial one
    a = run_job(COUNTER, ["--steps", "6", "--sleep", "0", "--checkpoint-every", "6",
                          "--pad-bytes", pad], tmp_path / "a" / "ck")
    b = run_job(COUNTER, ["--steps", "6", "--sleep", "0", "--checkpoint-every", "2",
                          "--pad-bytes", pad], tmp_path / "b" / "ck")
    assert a.returncode == 0 and b.returncode == 0, (a.stderr, b.stderr)
    pad_a = (tmp_path / "a" / "ck" / "ckpt-1" / "pad.bin").read_bytes()
    pad_b = (tmp_path / "b" / "ck" / "ckpt-3" / "pad.bin").read_bytes()
    assert len(pad_a) == 1024 * 1024 + 100 and pad_a == pad_b

    # Successive checkpoints differ in a few 4 KiB blocks only.
    sys.path.insert(0, str(EXAMPLES))
    try:
        import counter
    finally:
        sys.path.remove(str(EXAMPLES))
    p = counter.Pad(1 << 22, 0.01)  # 64 regions of 64 KiB: 1 block changes per step
    p.write(tmp_path / "s3", 3)
    p.write(tmp_path / "s4", 4)
    s3, s4 = (tmp_path / "s3").read_bytes(), (tmp_path / "s4").read_bytes()
    differing = sum(s3[i:i + 4096] != s4[i:i + 4096] for i in range(0, len(s3), 4096))
    assert 1 <= differing <= 2

    # A restore that does not give back the same bytes is detected.
    ck = tmp_path / "b" / "ck"
    corrupt = bytearray(pad_b)
    corrupt[12345] ^= 1
    (ck / "ckpt-3" / "pad.bin").write_bytes(bytes(corrupt))
    r = run_job(COUNTER, ["--steps", "8", "--sleep", "0", "--pad-bytes", pad], ck, restored=True)
    assert r.returncode == 3 and "corrupt" in r.stderr, r


def train_result(out: str) -> tuple[str, str, str]:
    lines = out.splitlines()
    assert len(lines) == 1, out
    m = TRAIN_RESULT.fullmatch(lines[0])
    assert m, out
    return m.group(1), m.group(2), m.group(3)


def test_torch_training_killed_and_restored_ends_bit_for_bit_like_an_uninterrupted_run(
        tmp_path: Path) -> None:
    steps = ["--steps", "200"]
    plain = run_job(TRAIN, steps + ["--result", str(tmp_path / "r.txt")], tmp_path / "plain" / "ck")
    assert plain.returncode == 0, plain.stderr
    want = train_result(plain.stdout)
    assert float(want[1]) < 0.1  # it learns
    assert (tmp_path / "r.txt").read_text() == plain.stdout[len("RESULT "):]

    ck = tmp_path / "run" / "ck"
    slow = steps + ["--sleep", "0.01"]
    # Asked by the signal, killed, restored; then again at a fixed step.
    kill_after_checkpoint(TRAIN, slow, ck, signal_at="start at step 0")
    number = kill_after_checkpoint(TRAIN, slow + ["--checkpoint-every", "60"], ck)
    assert number == 2
    again = run_job(TRAIN, steps, ck, restored=True)
    assert again.returncode == 0, again.stderr
    assert "train: resume at step 60 of 200" in again.stderr
    assert train_result(again.stdout) == want
