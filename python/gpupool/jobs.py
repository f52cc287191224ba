"""Jobs, their output and checkpoints, and interactive sessions, as the
client sees them (docs/api.md#jobs, docs/api.md#sessions-and-tunnels).

A :class:`Job` is a snapshot of the server's record (``job.data``) plus
calls on it; :meth:`Job.refresh` and :meth:`Job.wait` bring the snapshot up
to date. Objects here are not thread-safe to mutate; the client they share
is.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional

from ._http import query
from .blobs import fetch_manifest, restore_tree

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

__all__ = ["Job", "LogLine", "Checkpoint", "Session", "SessionLink", "FINAL_STATES"]

FINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})


class LogLine(str):
    """One line of a job's log: the text itself (a ``str``) with where it
    came from.

    Attributes:
        stream: ``"stdout"``, ``"stderr"`` or ``"event"`` (the pool's own news
            about the job: pulling its image, a limit it broke, ...).
        rank: the rank of a multi-node job that printed it (0 otherwise).
        attempt_id: the attempt (``"7.1"``).
        ts_ms: when it was written, in ms since the epoch.
        cursor: its place in the log (pass it as ``after`` to read on).
    """

    stream: str
    rank: int
    attempt_id: str
    ts_ms: int
    cursor: int

    def __new__(cls, record: Dict[str, Any]) -> "LogLine":
        line = super().__new__(cls, record.get("text", ""))
        line.stream = record.get("stream", "stdout")
        line.rank = int(record.get("rank", 0) or 0)
        line.attempt_id = record.get("attempt_id", "")
        line.ts_ms = int(record.get("ts_ms", 0) or 0)
        line.cursor = int(record.get("cursor", 0) or 0)
        return line


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint a job's attempt uploaded (docs/checkpoints.md)."""

    job: int
    number: int
    attempt: str
    manifest: str
    created_ms: int
    bytes: int
    files: int

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "Checkpoint":
        return cls(int(j["job"]), int(j["number"]), j.get("attempt", ""), j["manifest"],
                   int(j.get("created_ms", 0)), int(j.get("bytes", 0)), int(j.get("files", 0)))


class Job:
    """A job of the pool.

    Attributes:
        data: the job as the server last answered (``GET /v1/jobs/{id}``).
        replayed: True when a submission was answered from its idempotency
            key (the server had already made this job for the same request).
    """

    def __init__(self, client: "Client", data: Dict[str, Any], replayed: bool = False):
        self.client = client
        self.data = data
        self.replayed = replayed

    def __repr__(self) -> str:
        return f"<gpupool.Job {self.id} {self.state}{'' if self.exit_code is None else f' ({self.exit_code})'}>"

    @property
    def id(self) -> int:
        return int(self.data["id"])

    @property
    def state(self) -> str:
        """``pending``, ``scheduled``, ``running``, ``succeeded``, ``failed``
        or ``cancelled``, as of the last answer."""
        return self.data.get("state", "")

    @property
    def exit_code(self) -> Optional[int]:
        return self.data.get("exit_code")

    @property
    def reason(self) -> str:
        return self.data.get("reason", "") or ""

    @property
    def name(self) -> str:
        return self.data.get("name", "") or ""

    @property
    def spec(self) -> Dict[str, Any]:
        return self.data.get("spec", {}) or {}

    @property
    def done(self) -> bool:
        """Whether the job has finished (as of the last answer)."""
        return self.state in FINAL_STATES

    def refresh(self) -> "Job":
        """Reads the job again; returns itself."""
        self.data = self.client.call("GET", f"/v1/jobs/{self.id}")
        return self

    def wait(self, timeout: Optional[float] = None, until: str = "finished") -> str:
        """Waits until the job has finished (``until="running"``: runs, or has
        finished) with the server's long poll, and returns its state then.
        Raises :class:`TimeoutError` when `timeout` seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.state in FINAL_STATES or (until == "running" and self.state == "running"):
                return self.state
            wait_s = 30.0
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"job {self.id} is still {self.state} after {timeout:g} s")
                wait_s = min(wait_s, left)
            wait_ms = max(1, int(wait_s * 1000))
            self.data = self.client.call("GET", f"/v1/jobs/{self.id}" + query(until=until, wait=f"{wait_ms}ms"),
                                         timeout=wait_s + 60)

    def logs(self, follow: bool = False, events: bool = False, after: int = 0,
             rank: Optional[int] = None) -> Iterator[LogLine]:
        """The job's log lines, stdout and stderr of every attempt, in the
        order the server stored them. `follow`: keep reading (long poll)
        until the job has finished and every line was read; otherwise stop at
        the end of what is there now. `events`: include the pool's own events
        (``line.stream == "event"``). `rank`: only that rank's lines of a
        multi-node job. `after`: start after this cursor."""
        cursor = after
        while True:
            page = self.client.call("GET", f"/v1/jobs/{self.id}/logs" + query(
                after=cursor, limit=1000, wait="30s" if follow else None, rank=rank), timeout=90)
            for record in page.get("lines", []):
                if events or record.get("stream") != "event":
                    yield LogLine(record)
            nxt = int(page.get("next_cursor", cursor))
            if page.get("complete"):
                return
            if not follow and nxt == cursor:
                return
            cursor = nxt

    def cancel(self) -> "Job":
        """Cancels the job (a finished job stays as it is); returns itself."""
        self.data = self.client.call("POST", f"/v1/jobs/{self.id}/cancel", {}, idempotent=True)
        return self

    def checkpoints(self) -> List[Checkpoint]:
        """The job's stored checkpoints, oldest first."""
        page = self.client.call("GET", f"/v1/jobs/{self.id}/checkpoints")
        return [Checkpoint.from_json(c) for c in page.get("checkpoints", [])]

    def checkpoint(self, number: Optional[int] = None) -> Checkpoint:
        """One checkpoint (the newest without `number`); NotFound if none."""
        which = "latest" if number is None else str(int(number))
        return Checkpoint.from_json(self.client.call("GET", f"/v1/jobs/{self.id}/checkpoints/{which}"))

    def download_checkpoint(self, path: str, number: Optional[int] = None) -> Checkpoint:
        """Restores checkpoint `number` (default: the newest) into `path`,
        which must not exist or be an empty directory: the tree the agent
        uploaded (``ckpt-<N>/...``), every chunk verified. Nothing is left
        in `path` on failure. Needs the zstandard package."""
        c = self.checkpoint(number)
        restore_tree(self.client, fetch_manifest(self.client, c.manifest), path)
        return c


@dataclass(frozen=True)
class SessionLink:
    """A one-time sign-in link to a Jupyter session (``POST
    /v1/sessions/{id}/link``): open `url` once within `expires_in_s`;
    `jupyter_token` serves the owner's own tunnel."""

    url: str
    expires_in_s: int
    jupyter_token: str


class Session:
    """An interactive session: a job with a ``session`` section.

    Attributes:
        job: its :class:`Job`.
        link: for a running Jupyter session, a sign-in link (None for other
            kinds, or before it runs). Links work once: :meth:`new_link`
            makes another.
    """

    def __init__(self, job: Job, link: Optional[SessionLink] = None):
        self.job = job
        self.link = link

    def __repr__(self) -> str:
        return f"<gpupool.Session {self.id} {self.kind} {self.job.state}>"

    @property
    def id(self) -> int:
        return self.job.id

    @property
    def kind(self) -> str:
        return (self.job.spec.get("session") or {}).get("kind", "shell")

    @property
    def url(self) -> Optional[str]:
        """The sign-in link's URL, if there is one."""
        return self.link.url if self.link else None

    def new_link(self) -> SessionLink:
        """A new one-time sign-in link (the session must be a running Jupyter
        session: Conflict otherwise)."""
        client = self.job.client
        r = client.call("POST", f"/v1/sessions/{self.id}/link", {})
        url = r.get("url", "")
        if not url.startswith(("http://", "https://")):  # servers before the sessions' address
            url = client.transport.last_answered() + url
        self.link = SessionLink(url, int(r.get("expires_in_s", 0)), r.get("jupyter_token", ""))
        return self.link

    def stop(self) -> Job:
        """Ends the session (cancels its job)."""
        return self.job.cancel()
