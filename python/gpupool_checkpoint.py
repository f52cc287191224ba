"""Checkpoints for jobs that run in a gpupool pool (and on a laptop).

Copy this file next to your script: it is one file, standard library only,
Python 3.8 or later (written for 3.11). The whole contract is in
docs/checkpoints.md; in short:

* The pool gives the job ``GPUPOOL_CHECKPOINT_DIR`` (an existing, writable
  directory), ``GPUPOOL_CHECKPOINT_SIGNAL`` (``SIGUSR1`` by default, or
  ``none``) and, on an attempt that starts from an earlier checkpoint,
  ``GPUPOOL_RESTORED=1``.
* A checkpoint is a directory ``ckpt-<N>`` directly under that directory.
  It is written under a hidden staging name (flushed to disk outside the
  pool, where nothing else keeps it), and committed
  by renaming it to ``ckpt-<N>`` with N greater than every earlier N. The
  rename is atomic, so the agent, which reads only ``ckpt-<N>`` directories
  and takes the highest N, never sees half a checkpoint. A committed
  checkpoint is never changed again; older ones may be deleted.
* The agent sends the checkpoint signal at the spec's ``checkpoint.interval``
  and before it moves the job elsewhere; then it waits for a new commit (at
  most half of ``checkpoint.grace``) before it sends SIGTERM. It uploads new
  commits whenever they appear, signal or not.

Use::

    from gpupool_checkpoint import Checkpointer

    ckpt = Checkpointer()                  # ./checkpoints outside the pool
    state = ckpt.load_json() or {"step": 0}
    while state["step"] < 1000:
        train_one_step(state)
        if ckpt.requested() or state["step"] % 100 == 0:
            ckpt.save_json(state)

Outside the pool (no ``GPUPOOL_CHECKPOINT_DIR``) the checkpoints go to the
directory the script names (default ``./checkpoints``) and SIGUSR1 requests
one (``kill -USR1 PID``), so the same script runs unchanged on a laptop and
resumes there from its own last checkpoint.

Threads and processes: create one Checkpointer per job, in the main thread
(Python only installs signal handlers there), and call it from one thread.
Only one process of a job may save (rank 0 of a multi-process job); see
docs/checkpoints.md for the other processes and the signal.

The signal handler only counts the request; all I/O happens in ``save``, in
the caller's thread, so a signal that arrives while a checkpoint is being
written does no harm: it is simply a new request. SIGTERM is left alone
(unless the spec chose SIGTERM as its checkpoint signal): the agent sends it
when the job must stop, and SIGKILL follows at the end of the grace.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal as _signal
import stat
from pathlib import Path
from types import FrameType
from typing import Any, Callable, TypeVar, Union

__all__ = ["Checkpointer", "ENV_DIR", "ENV_SIGNAL", "ENV_RESTORED"]

ENV_DIR = "GPUPOOL_CHECKPOINT_DIR"
ENV_SIGNAL = "GPUPOOL_CHECKPOINT_SIGNAL"
ENV_RESTORED = "GPUPOOL_RESTORED"

# A committed checkpoint: "ckpt-" and a decimal number without leading zeros.
_COMMITTED = re.compile(r"ckpt-(0|[1-9][0-9]*)")
# This helper's own hidden work directories: ".staging-<pid>-<seq>" (a
# checkpoint being written, or an old one being deleted).
_STAGING_PREFIX = ".staging-"
_STAGING = re.compile(r"\.staging-([0-9]+)-[0-9]+")

T = TypeVar("T")
SignalSpec = Union[int, str, _signal.Signals, None]


def _parse_signal(value: SignalSpec) -> _signal.Signals | None:
    """SIGUSR1, "SIGUSR1", "USR1", "usr1", 10 -> Signals.SIGUSR1; None, "none", "" -> None."""
    if value is None:
        return None
    if isinstance(value, int):  # also Signals, an IntEnum
        return _signal.Signals(value)
    text = value.strip().upper()
    if text in ("", "NONE"):
        return None
    name = text if text.startswith("SIG") else "SIG" + text
    try:
        return _signal.Signals[name]
    except KeyError:
        raise ValueError(f"unknown checkpoint signal {value!r}") from None


def _fsync_path(path: Path, directory: bool) -> None:
    flags = os.O_RDONLY | (os.O_DIRECTORY if directory else 0)
    try:
        fd = os.open(path, flags)
    except PermissionError:
        if directory:
            raise
        fd = os.open(path, os.O_WRONLY)  # a file its writer made write-only
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """fsyncs every regular file and directory under root, root last.

    Symbolic links are not followed (a link itself is made durable by the
    fsync of the directory that holds it).
    """
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames + dirnames:
            path = Path(dirpath, name)
            mode = path.lstat().st_mode
            if stat.S_ISREG(mode):
                _fsync_path(path, directory=False)
            elif stat.S_ISDIR(mode):
                _fsync_path(path, directory=True)
    _fsync_path(root, directory=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


class Checkpointer:
    """Writes, commits, finds and reads a job's checkpoints.

    Args:
      dir: where checkpoints go OUTSIDE the pool (default ``./checkpoints``,
        created if missing). In the pool ``GPUPOOL_CHECKPOINT_DIR`` wins.
      keep: how many committed checkpoints to keep (at least 1); older ones
        are deleted after each commit.
      signal: the signal that requests a checkpoint OUTSIDE the pool
        (default SIGUSR1; ``"none"`` for none). In the pool
        ``GPUPOOL_CHECKPOINT_SIGNAL`` wins.

    Raises ValueError for a bad ``keep`` or signal name, and
    FileNotFoundError when ``GPUPOOL_RESTORED=1`` but the directory holds no
    checkpoint (the pool promised one: starting over would silently redo
    work).

    On start it removes the hidden ``.staging-*`` directories a killed run
    left behind. Committed checkpoints are numbered on from the highest one
    present, so numbers keep growing across restores.
    """

    def __init__(self, dir: str | os.PathLike[str] | None = None, keep: int = 1,
                 signal: SignalSpec = _signal.SIGUSR1, fsync: bool | None = None) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.keep = keep
        pool_dir = os.environ.get(ENV_DIR)
        #: True when running in the pool (GPUPOOL_CHECKPOINT_DIR is set).
        self.in_pool: bool = bool(pool_dir)
        #: Whether save() flushes to disk before the rename. By default only
        #: outside the pool: in it, a checkpoint survives by its upload (the
        #: pool never restores from the provider's disk), and flushing a
        #: large one would delay a migration by seconds.
        self.fsync: bool = (not self.in_pool) if fsync is None else fsync
        #: The directory that holds ckpt-<N> (absolute).
        self.directory: Path = Path(pool_dir or dir or "checkpoints").absolute()
        self.directory.mkdir(parents=True, exist_ok=True)
        #: The signal that requests a checkpoint, or None.
        self.signal: _signal.Signals | None = _parse_signal(
            os.environ.get(ENV_SIGNAL, "SIGUSR1") if self.in_pool else signal)

        self._clean_staging()
        self._seq = 0            # for unique staging names
        self._requests = 0       # signals (and request() calls) received
        self._served = 0         # of those, the ones a save began after
        self._last_number = 0    # the highest N this object committed
        start = self.latest()
        #: True when a checkpoint was already there when this object was
        #: made: in the pool a restored attempt (GPUPOOL_RESTORED=1), outside
        #: it an earlier run's.
        self.restored: bool = start is not None
        if self.in_pool and os.environ.get(ENV_RESTORED) == "1" and start is None:
            raise FileNotFoundError(
                f"{ENV_RESTORED}=1 but {self.directory} holds no ckpt-<N> directory")

        self._previous_handler: Any = None
        if self.signal is not None:
            # ValueError outside the main thread, as signal.signal raises it.
            self._previous_handler = _signal.signal(self.signal, self._on_signal)

    # --- requests -----------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only count: no I/O, no locks. Python runs this in the main thread
        # between bytecodes, so the count is never torn.
        self._requests += 1

    def request(self) -> None:
        """Asks for a checkpoint, as the signal does (e.g. from your own handler or timer)."""
        self._requests += 1

    def requested(self) -> bool:
        """True when a checkpoint was requested after the last save() began.

        A request that arrives while save() runs stays pending: the state that
        save() is writing may predate it.
        """
        return self._requests > self._served

    # --- writing ------------------------------------------------------------

    def save(self, write_fn: Callable[[Path], object]) -> Path:
        """Writes, flushes and commits a checkpoint; returns its ckpt-<N> path.

        ``write_fn(path)`` writes the checkpoint's files into the empty
        staging directory ``path`` (subdirectories are fine). Then every file
        and directory in it is fsynced (when ``self.fsync``), it is renamed
        to ``ckpt-<N>`` with N one above the highest present, the parent
        directory is fsynced (likewise), and all but the ``keep`` newest
        checkpoints are deleted.

        If write_fn raises, the staging directory is removed, nothing is
        committed, the pending request stays pending, and the exception
        propagates.
        """
        served_before = self._served
        self._served = self._requests
        self._seq += 1
        staging = self.directory / f"{_STAGING_PREFIX}{os.getpid()}-{self._seq}"
        try:
            staging.mkdir()
            write_fn(staging)
            if self.fsync:
                _fsync_tree(staging)
            final = self._commit(staging)
        except BaseException:
            self._served = served_before
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self._prune()
        return final

    def _commit(self, staging: Path) -> Path:
        number = max(self._last_number, self._latest_number() or 0) + 1
        while True:
            final = self.directory / f"ckpt-{number}"
            # Only this process commits here (see the module doc), so checking
            # first is enough to never rename onto an existing (empty) ckpt-N.
            if not os.path.lexists(final):
                try:
                    os.rename(staging, final)
                    break
                except OSError:
                    if not os.path.lexists(final):
                        raise
            number += 1
        if self.fsync:
            _fsync_path(self.directory, directory=True)
        self._last_number = number
        return final

    def _prune(self) -> None:
        for _, path in self._committed()[:-self.keep]:
            # Hide it first (atomically), then delete: a run killed while
            # deleting leaves a hidden staging directory, never a partial
            # ckpt-<N>.
            self._seq += 1
            doomed = self.directory / f"{_STAGING_PREFIX}{os.getpid()}-{self._seq}"
            try:
                os.rename(path, doomed)
            except OSError:
                continue  # already gone; the commit stands either way
            shutil.rmtree(doomed, ignore_errors=True)

    def save_json(self, state: Any, name: str = "state.json") -> Path:
        """Saves a small JSON-serializable state as ``<ckpt>/<name>``; returns the ckpt path."""
        data = json.dumps(state, sort_keys=True).encode()

        def write(path: Path) -> None:
            (path / name).write_bytes(data)

        return self.save(write)

    # --- reading ------------------------------------------------------------

    def _committed(self) -> list[tuple[int, Path]]:
        """The committed checkpoints (real directories named ckpt-<N>), by N."""
        found = []
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return []
        for entry in entries:
            m = _COMMITTED.fullmatch(entry.name)
            if m and entry.is_dir(follow_symlinks=False):
                found.append((int(m.group(1)), Path(entry.path)))
        found.sort()
        return found

    def _latest_number(self) -> int | None:
        committed = self._committed()
        return committed[-1][0] if committed else None

    def latest(self) -> Path | None:
        """The newest committed checkpoint (highest N), or None."""
        committed = self._committed()
        return committed[-1][1] if committed else None

    def load(self, read_fn: Callable[[Path], T]) -> T | None:
        """``read_fn(latest())``, or None when there is no checkpoint."""
        path = self.latest()
        return None if path is None else read_fn(path)

    def load_json(self, name: str = "state.json") -> Any | None:
        """The state save_json wrote into the newest checkpoint, or None."""
        return self.load(lambda path: json.loads((path / name).read_bytes()))

    # --- housekeeping -------------------------------------------------------

    def _clean_staging(self) -> None:
        """Removes .staging-* directories of runs that no longer exist."""
        for entry in os.scandir(self.directory):
            if not entry.name.startswith(_STAGING_PREFIX):
                continue
            m = _STAGING.fullmatch(entry.name)
            pid = int(m.group(1)) if m else None
            # Another live process's staging directory may be in use (a
            # second Checkpointer in a job, against the rules, or a laptop
            # run still going): leave it.
            if pid is not None and pid != os.getpid() and _pid_alive(pid):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                Path(entry.path).unlink(missing_ok=True)

    def close(self) -> None:
        """Puts back the signal handler that was there before."""
        if self.signal is not None and self._previous_handler is not None:
            _signal.signal(self.signal, self._previous_handler)
            self._previous_handler = None

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
