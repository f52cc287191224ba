"""Python functions run as jobs on the pool: :class:`Executor`, a
:class:`concurrent.futures.Executor`.

    with gpupool.Executor(client, gpus=1) as ex:
        future = ex.submit(train, lr=0.1)
        print(future.result())

How a call travels (no shared file system is assumed):

* **There.** ``submit(fn, *args, **kwargs)`` pickles ``(fn, args, kwargs)``
  at once, in the caller's thread (cloudpickle when it is importable, which
  pickles functions defined in ``__main__``, nested functions and lambdas by
  value; otherwise the standard pickle, which pickles functions *by name*:
  the function's module must then be importable on the pool, e.g. uploaded
  with ``workdir=``). The pickle is uploaded through the blob API as a file
  of the job's inputs (``.gpupool/call.pkl``, beside the bootstrap
  ``.gpupool/run.py``, added to ``workdir`` if one is given), so its size is
  bounded only by the server's storage quota; only chunks the pool lacks
  travel. The job runs ``python3 .gpupool/run.py``.
* **Back.** The bootstrap writes the pickled result, or the exception with
  its formatted traceback, after the function's own output, as base64 lines
  of the job's stdout marked with a random nonce (4 KiB of text each); the
  client reads them from the job's log once the job has finished. A result is
  bounded by the job output limit (``--max-job-output``, 1 GiB by default;
  base64 adds a third): keep results small (tens of MiB at most) and write
  large ones to checkpoints or elsewhere.

The future's result is the function's return value; if the function raised,
the future raises that exception (with the remote traceback as its
``__cause__`` and in ``exc.remote_traceback``), or a
:class:`~gpupool.RemoteError` carrying the traceback text when the exception
cannot be brought back (it does not pickle, or its class does not import
here). A job that ends with no result (killed, lost, cancelled on the pool)
raises :class:`~gpupool.JobFailed`.

**Trust.** Results are unpickled on your machine, and whoever controls the
machine a job runs on can write its output. Use ``results="json"`` (values
and errors come back as JSON, nothing is unpickled) for machines you do not
trust.

Thread-safety: submit, cancel and shutdown may be called from any thread.
"""
from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import json
import os
import pathlib
import pickle
import re
import secrets
import threading
from typing import Any, Callable, Dict, List, Optional, Set

from .client import Client
from .errors import GpupoolError, JobFailed, RemoteError, Unavailable
from .jobs import Job

__all__ = ["Executor", "JobFuture"]

try:  # optional: Debian's python3-cloudpickle
    import cloudpickle as _cloudpickle
except ImportError:  # pragma: no cover - depends on the machine
    _cloudpickle = None

_PREFIX = "GPUPOOL-RESULT"
_PROTOCOL = 4  # readable by any Python 3.4+
_BOOTSTRAP = pathlib.Path(__file__).with_name("_remote.py")


class _RemoteTraceback(Exception):
    """The traceback of an exception raised on the pool (as the
    ``__cause__`` of the exception the future raises)."""

    def __init__(self, tb: str):
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return f'\n"""\n{self.tb}"""'


class JobFuture(concurrent.futures.Future):
    """A :class:`concurrent.futures.Future` for a call run as a job.

    Its state stays *pending* until the job's outcome is known (``running()``
    is False while the job runs): so :meth:`cancel` works until then, and
    cancels the job on the pool.

    Attributes:
        job: the :class:`~gpupool.Job` once submitted (None before).
    """

    def __init__(self) -> None:
        super().__init__()
        self.job: Optional[Job] = None
        self._gp_lock = threading.RLock()  # a done callback may call cancel()

    def cancel(self) -> bool:
        """Cancels the call, and its job if it was submitted. False once the
        outcome is known."""
        with self._gp_lock:
            if not super().cancel():
                return False
            if self._state == concurrent.futures._base.CANCELLED:
                self.set_running_or_notify_cancel()  # wakes wait() and as_completed()
            job = self.job
        if job is not None:
            try:
                job.cancel()
            except GpupoolError:
                pass  # best effort: the job may have ended, or the pool be out of reach
        return True

    def _settle(self, result: Any = None, error: Optional[BaseException] = None) -> None:
        with self._gp_lock:
            if self.cancelled() or self.done():
                return
            self.set_running_or_notify_cancel()
            if error is not None:
                self.set_exception(error)
            else:
                self.set_result(result)


def _job_name(fn: Callable[..., Any]) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "_", getattr(fn, "__name__", "call"))
    return ("py-" + name)[:128]


class Executor(concurrent.futures.Executor):
    """Runs callables as jobs on the pool (see the module's doc).

    Args:
        client: the :class:`~gpupool.Client` of the pool.
        gpus: GPUs per call (``resources.gpus``; 0 for none).
        python: the interpreter the job runs (``"python3"``: the first on the
            job's PATH). Its version should match yours for cloudpickle.
        workdir: a local directory uploaded with every call (your modules,
            data), the job's work directory there.
        pickler: a module with ``dumps`` (``pickle``, ``cloudpickle``); default
            cloudpickle when importable, else pickle.
        results: ``"pickle"`` (values and exceptions as they are) or ``"json"``
            (JSON values; exceptions as :class:`~gpupool.RemoteError`; nothing
            unpickled here).
        poll_interval: seconds between looks at the submitted jobs.
        max_uploads: calls uploaded and submitted at once.
        submit_options: more spec fields for every job (``executor="process"``,
            ``env={...}``, ``max_runtime="1h"``, ``resources={"memory": "8GiB"}``).
    """

    def __init__(self, client: Client, gpus: Any = 1, *, python: str = "python3",
                 workdir: Optional[str] = None, pickler: Any = None, results: str = "pickle",
                 poll_interval: float = 0.5, max_uploads: int = 4, **submit_options: Any):
        if results not in ("pickle", "json"):
            raise ValueError('results must be "pickle" or "json"')
        for forbidden in ("command", "run", "spec", "spec_file", "idempotency_key"):
            if forbidden in submit_options:
                raise TypeError(f"Executor sets {forbidden} itself")
        self.client = client
        self.gpus = gpus
        self.python = python
        self.workdir = workdir
        self.pickler = pickler or _cloudpickle or pickle
        self.results = results
        self.poll_interval = poll_interval
        self.submit_options = submit_options
        self._bootstrap = _BOOTSTRAP.read_bytes()
        self._uploads = concurrent.futures.ThreadPoolExecutor(max_uploads, thread_name_prefix="gpupool-submit")
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._futures: Set[JobFuture] = set()
        self._watched: Dict[int, tuple] = {}  # job id -> (future, nonce)
        self._shutdown = False
        self._watcher = threading.Thread(target=self._watch, name="gpupool-watch", daemon=True)
        self._watcher.start()

    # ---- submit ----
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> JobFuture:
        """Runs ``fn(*args, **kwargs)`` as a job; returns its future. The call
        is pickled here, now (a pickling error raises here); uploading and
        submitting happen in the background."""
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit after shutdown")
        payload = self.pickler.dumps((fn, args, kwargs), protocol=_PROTOCOL)
        future = JobFuture()
        nonce = secrets.token_hex(12)
        with self._lock:
            self._futures.add(future)
        future.add_done_callback(self._forget)
        self._uploads.submit(self._launch, future, fn, payload, nonce)
        return future

    def _forget(self, future: concurrent.futures.Future) -> None:
        with self._lock:
            self._futures.discard(future)  # type: ignore[arg-type]

    def _launch(self, future: JobFuture, fn: Callable[..., Any], payload: bytes, nonce: str) -> None:
        if future.cancelled():
            return
        try:
            meta = {"nonce": nonce, "results": self.results, "protocol": _PROTOCOL}
            extra = {".gpupool/run.py": self._bootstrap, ".gpupool/call.pkl": payload,
                     ".gpupool/call.json": json.dumps(meta).encode()}
            upload = self.client.upload(self.workdir, extra)
            options = dict(self.submit_options)
            options.setdefault("name", _job_name(fn))
            spec = self.client.build_spec([self.python, ".gpupool/run.py"], gpus=self.gpus, **options)
            spec["inputs"] = upload.manifest
            if self.workdir is not None:
                spec["workdir"] = os.path.abspath(self.workdir)
            job = self.client.submit_spec(spec)
        except BaseException as e:  # noqa: B902 (the future reports it)
            future._settle(error=e)
            return
        with future._gp_lock:
            future.job = job
            cancelled = future.cancelled()
        if cancelled:
            try:
                job.cancel()
            except GpupoolError:
                pass
            return
        with self._lock:
            self._watched[job.id] = (future, nonce)
        self._wake.set()

    # ---- watch ----
    def _watch(self) -> None:
        """Finds the submitted jobs that finished, a page of finished jobs at
        a time, and hands each to a thread that reads its result."""
        failures = 0
        while True:
            with self._lock:
                watched = dict(self._watched)
                done = self._shutdown and not self._futures
            if done:
                return
            if watched:
                try:
                    for job in self._finished(watched):
                        with self._lock:
                            future, nonce = self._watched.pop(job.id)
                        self._uploads.submit(self._finish, future, job, nonce)
                    failures = 0
                except Unavailable:
                    failures += 1
                except GpupoolError as e:  # a refused token or the like: it will not heal
                    with self._lock:
                        lost, self._watched = list(self._watched.values()), {}
                    for future, _ in lost:
                        future._settle(error=e)
            # Nothing to watch: sleep until a call is submitted or shutdown.
            self._wake.wait(self.poll_interval * min(10, 1 + failures) if watched else None)
            self._wake.clear()

    def _finished(self, watched: Dict[int, tuple]) -> List[Job]:
        out, after, top = [], min(watched) - 1, max(watched)
        while after < top:
            page = self.client.jobs(["succeeded", "failed", "cancelled"], limit=1000, after=after)
            out += [j for j in page if j.id in watched]
            if len(page) < 1000:
                break
            after = page[-1].id
        return out

    def _finish(self, future: JobFuture, job: Job, nonce: str) -> None:
        try:
            job.refresh()
            future.job = job  # the job as it ended
            future._settle(result=self._outcome(job, nonce))
        except BaseException as e:  # noqa: B902 (the future reports it)
            future._settle(error=e)

    def _outcome(self, job: Job, nonce: str) -> Any:
        """The call's value, or raises what it raised."""
        payload = self._read_payload(job, nonce)
        if payload is None:
            raise JobFailed(f"job {job.id} {job.state} without a result: {job.reason or 'no reason given'}", job)
        if self.results == "json":
            outcome = json.loads(payload)
            if "ok" in outcome:
                return outcome["ok"]
            err = outcome.get("error", {})
            raise RemoteError(err.get("type", "?"), err.get("message", ""), err.get("traceback", ""), job)
        kind, value, tb, type_name, message = pickle.loads(payload)  # plain values only
        if kind == "ok":
            try:
                return pickle.loads(value)
            except Exception as e:
                raise GpupoolError(f"cannot unpickle the result of job {job.id}: {e!r}") from e
        exc = None
        if value is not None:
            try:
                exc = pickle.loads(value)
            except Exception:  # its class does not import here, say
                exc = None
        if not isinstance(exc, BaseException):
            raise RemoteError(type_name, message, tb, job)
        try:
            exc.remote_traceback = tb  # type: ignore[attr-defined]
        except AttributeError:
            pass
        exc.__cause__ = _RemoteTraceback(tb)
        raise exc

    def _read_payload(self, job: Job, nonce: str) -> Optional[bytes]:
        """The last complete result the job's stdout holds (a later attempt's
        replaces an earlier one's), checked against its digest."""
        mark = f"{_PREFIX} {nonce} "
        result, current, pieces = None, None, []
        for line in job.logs():
            if line.stream != "stdout" or not line.startswith(mark):
                continue
            words = line[len(mark):].split(" ")
            if words[0] == "begin" and len(words) == 3:
                current, pieces = (int(words[1]), words[2]), []
            elif words[0] == "end" and current is not None:
                data = b"".join(base64.b64decode(p) for p in pieces)
                if len(data) == current[0] and hashlib.sha256(data).hexdigest() == current[1]:
                    result = data
                current = None
            elif current is not None and len(words) == 2 and words[0] == str(len(pieces)):
                pieces.append(words[1])
            else:
                current = None  # out of order: that attempt's result is incomplete
        return result

    # ---- shutdown ----
    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more submissions. `cancel_futures`: cancel every call whose
        outcome is not known yet, and its job. `wait`: return once every
        future is done."""
        with self._lock:
            self._shutdown = True
            futures = list(self._futures)
        if cancel_futures:
            for f in futures:
                f.cancel()
        self._wake.set()
        if wait:
            concurrent.futures.wait(futures)
            self._watcher.join()
            self._uploads.shutdown(wait=True)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        """Waits for every call; on an exception (Ctrl-C included), cancels
        the calls still running first, so no job is left on the pool."""
        self.shutdown(wait=True, cancel_futures=exc_type is not None)
        return False
