"""The pool's REST API from Python: :class:`Client` (docs/api.md).

    import gpupool

    pool = gpupool.Client.from_config()          # as the CLI: its config and environment
    job = pool.submit(command=["python3", "train.py"], workdir=".", gpus=1)
    for line in job.logs(follow=True):
        print(line)
    print(job.wait(), job.exit_code)

Thread-safety: a Client may be shared by threads.
"""
from __future__ import annotations

import copy
import json
import os
import time
import uuid
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ._config import Endpoint, resolve_endpoint
from ._http import Answer, Transport, query
from ._tls import TlsSettings
from .blobs import UploadResult, upload_tree
from .errors import BadRequest, GpupoolError, TLSVerificationError, Unavailable, error_from_answer
from .jobs import Job, Session

__all__ = ["Client"]

_SUBMIT_RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0)


def _load_spec_file(path: str) -> Dict[str, Any]:
    """A spec file: JSON always; YAML when PyYAML is importable."""
    with open(path, "rb") as f:
        text = f.read().decode("utf-8")
    try:
        spec = json.loads(text)
    except ValueError:
        try:
            import yaml  # Debian: python3-yaml
        except ImportError:
            raise BadRequest(f"{path}: not JSON, and reading YAML needs PyYAML (Debian: python3-yaml)") from None
        try:
            spec = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise BadRequest(f"{path}: {e}") from None
    if not isinstance(spec, dict):
        raise BadRequest(f"{path}: a job spec must be a mapping")
    return spec


def _absolute(path: str, base: str) -> str:
    out = os.path.normpath(os.path.join(os.path.abspath(base or "."), path))
    return out


class Client:
    """A connection to a pool.

    Args:
        server: the server's URL, or a comma-separated list of a pool's
            servers (``"https://a:8470,https://b:8470"``), followed as the
            CLI does.
        token: an API token (``gpupool token create``, or ``gpupool login``).
        ca_fingerprint: ``"sha256:..."``, the pool CA's fingerprint the server
            printed at its first start: the CA is pinned as the CLI pins it.
        ca_file: a PEM bundle of CAs to trust instead (host names checked).
        insecure: no TLS check at all (development only).
        timeout: seconds a call may wait on the network (long polls add their
            own wait).
    """

    def __init__(self, server: str, token: str = "", ca_fingerprint: Optional[str] = None, *,
                 ca_file: Optional[str] = None, insecure: bool = False, timeout: float = 30.0):
        self.endpoint = Endpoint(server, token or "", ca_fingerprint or "", ca_file or "", insecure)
        tls = TlsSettings(self.endpoint.ca_fingerprint, self.endpoint.ca_file, insecure)
        self.transport = Transport(server, self.endpoint.token, tls, timeout)

    @classmethod
    def from_config(cls, server: Optional[str] = None, token: Optional[str] = None,
                    ca_fingerprint: Optional[str] = None, *, ca_file: Optional[str] = None,
                    insecure: bool = False, timeout: float = 30.0,
                    env: Optional[Mapping[str, str]] = None) -> "Client":
        """A client for the pool the CLI would use: the arguments first, then
        ``GPUPOOL_SERVER`` / ``GPUPOOL_TOKEN`` / ``GPUPOOL_CA_FINGERPRINT`` /
        ``GPUPOOL_CA_FILE``, then the config file (``GPUPOOL_CONFIG``, or
        ``~/.config/gpupool/config.json``), with the CLI's rule that a token
        or pin is only used for the server it was given for."""
        e = resolve_endpoint(server, token, ca_fingerprint, ca_file, insecure, env)
        return cls(e.server, e.token, e.ca_fingerprint or None, ca_file=e.ca_file or None,
                   insecure=e.insecure, timeout=timeout)

    def __repr__(self) -> str:
        return f"<gpupool.Client {self.endpoint.server}>"

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes kept connections (the client stays usable)."""
        self.transport.close()

    # ---- raw calls ----
    def call_raw(self, method: str, target: str, body: Optional[bytes] = None, *,
                 content_type: Optional[str] = None, headers: Optional[Mapping[str, str]] = None,
                 timeout: Optional[float] = None, submit: bool = False,
                 idempotent: Optional[bool] = None) -> Answer:
        """One request; returns a 2xx answer, raises the matching
        :class:`~gpupool.GpupoolError` otherwise. `idempotent`: the request
        may be sent twice (see :meth:`Transport.request`)."""
        hdrs = dict(headers or {})
        if content_type:
            hdrs["Content-Type"] = content_type
        answer = self.transport.request(method, target, body, hdrs, timeout, idempotent)
        if 200 <= answer.status < 300:
            return answer
        raise error_from_answer(answer.status, answer.body, answer.headers, submit=submit)

    def call(self, method: str, target: str, body: Any = None, *, timeout: Optional[float] = None,
             headers: Optional[Mapping[str, str]] = None, idempotent: Optional[bool] = None) -> Any:
        """A JSON call: `body` (if not None) sent as JSON; the parsed JSON
        answer returned."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        answer = self.call_raw(method, target, data, headers=headers, timeout=timeout,
                               idempotent=idempotent)
        try:
            return json.loads(answer.body or b"null")
        except ValueError:
            raise GpupoolError(f"{method} {target}: the server sent invalid JSON") from None

    # ---- jobs ----
    def upload(self, directory: Optional[str], extra_files: Optional[Mapping[str, bytes]] = None) -> UploadResult:
        """Uploads a directory (and/or files given in memory) as a job's inputs;
        returns its manifest id and what it cost. ``submit(workdir=...)`` does
        this for you."""
        return upload_tree(self, directory, extra_files)

    def build_spec(self, command: Optional[Sequence[str]] = None, *, run: Optional[str] = None,
                   spec: Optional[Mapping[str, Any]] = None, spec_file: Optional[str] = None,
                   workdir: Optional[str] = None, gpus: Union[int, float, str, None] = None,
                   name: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                   executor: Optional[str] = None, **more: Any) -> Dict[str, Any]:
        """The spec :meth:`submit` would send (without uploading anything), as
        the CLI builds it: the file or `spec` first, the arguments on top; a
        relative ``workdir`` in a spec file is relative to the file."""
        if spec is not None and spec_file is not None:
            raise BadRequest("give spec or spec_file, not both")
        if isinstance(command, str):
            raise TypeError("command is a list of arguments; give a shell line as run=")
        j: Dict[str, Any] = {}
        if spec_file is not None:
            j = _load_spec_file(spec_file)
            if isinstance(j.get("workdir"), str) and j["workdir"]:
                j["workdir"] = _absolute(j["workdir"], os.path.dirname(spec_file))
        elif spec is not None:
            j = copy.deepcopy(dict(spec))
        if workdir is not None:
            j["workdir"] = _absolute(os.fspath(workdir), ".")
        if command is not None:
            j.pop("run", None)
            j["command"] = [str(a) for a in command]
        if run is not None:
            j.pop("command", None)
            j["run"] = run
        if name is not None:
            j["name"] = name
        if gpus is not None:
            j.setdefault("resources", {})["gpus"] = gpus
        if env:
            j["env"] = {**(j.get("env") or {}), **{str(k): str(v) for k, v in env.items()}}
        if executor is not None:
            j["executor"] = executor
        for key, value in more.items():
            if key == "resources" and isinstance(value, Mapping):
                j["resources"] = {**(j.get("resources") or {}), **value}
            else:
                j[key] = value
        return j

    def submit(self, command: Optional[Sequence[str]] = None, *, run: Optional[str] = None,
               spec: Optional[Mapping[str, Any]] = None, spec_file: Optional[str] = None,
               workdir: Optional[str] = None, gpus: Union[int, float, str, None] = None,
               name: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
               executor: Optional[str] = None, idempotency_key: Optional[str] = None,
               **more: Any) -> Job:
        """Submits a job and returns it.

        Args:
            command: the program and its arguments (``["python3", "train.py"]``).
            run: or a shell line (``/bin/sh -c``).
            spec: or a whole spec (a dict, as ``job.yaml`` holds), or
            spec_file: a spec file (JSON; YAML when PyYAML is installed).
            workdir: a local directory to upload as the job's work directory
                (``.gpupoolignore`` applies; only chunks the pool lacks travel).
            gpus, name, env, executor: those fields of the spec.
            idempotency_key: sent as ``Idempotency-Key``: a repeat with the
                same key makes no second job (the server answers with the
                first). Without one, a random key is made for this call, so
                that its own retries are safe.
            more: any other spec field (``max_runtime="1h"``,
                ``resources={"memory": "8GiB"}``, ``checkpoint={}``, ...).

        A submission whose answer was lost (the connection broke after the
        request went out, or no answer came in time, or the pool had no
        leader) is sent again with the same key, up to four times.

        Raises:
            InvalidSpec: the server refused the spec (``e.field`` names the field).
            Conflict: the key was used before with another spec.
        """
        j = self.build_spec(command, run=run, spec=spec, spec_file=spec_file, workdir=workdir,
                            gpus=gpus, name=name, env=env, executor=executor, **more)
        if isinstance(j.get("workdir"), str) and j["workdir"]:
            j["inputs"] = self.upload(j["workdir"]).manifest
        return self.submit_spec(j, idempotency_key)

    def submit_spec(self, spec: Mapping[str, Any], idempotency_key: Optional[str] = None) -> Job:
        """POST /v1/jobs with `spec` as it is (inputs already uploaded), with
        an idempotency key and the retries :meth:`submit` describes."""
        key = idempotency_key if idempotency_key is not None else "py-" + uuid.uuid4().hex
        body = json.dumps(spec).encode("utf-8")
        for attempt in range(len(_SUBMIT_RETRY_DELAYS) + 1):
            try:
                answer = self.call_raw("POST", "/v1/jobs", body, headers={"Idempotency-Key": key},
                                       submit=True, idempotent=True)
                break
            except TLSVerificationError:
                raise
            except Unavailable:
                if attempt == len(_SUBMIT_RETRY_DELAYS):
                    raise
                time.sleep(_SUBMIT_RETRY_DELAYS[attempt])
        replayed = answer.headers.get("idempotent-replayed", "").lower() == "true"
        return Job(self, json.loads(answer.body), replayed=replayed)

    def job(self, job_id: int) -> Job:
        """The job `job_id` (NotFound if there is none, or one may not see it)."""
        return Job(self, self.call("GET", f"/v1/jobs/{int(job_id)}"))

    def jobs(self, state: Union[str, Sequence[str], None] = None, *, limit: int = 100,
             owner: Optional[str] = None, after: Optional[int] = None,
             before: Optional[int] = None) -> List[Job]:
        """Jobs, newest first (with `after`: ids above it, oldest first).
        `state`: one state or several (``["pending", "running"]``)."""
        states = [state] if isinstance(state, str) else state
        page = self.call("GET", "/v1/jobs" + query(state=states, limit=limit, owner=owner,
                                                   after=after, before=before))
        return [Job(self, j) for j in page.get("jobs", [])]

    def nodes(self) -> List[Dict[str, Any]]:
        """The pool's machines, as ``GET /v1/nodes`` gives them."""
        return self.call("GET", "/v1/nodes").get("nodes", [])

    def whoami(self) -> Dict[str, Any]:
        """Who the token is: subject, role, scopes, groups."""
        return self.call("GET", "/v1/whoami")

    # ---- sessions ----
    def sessions(self) -> List[Session]:
        """The sessions that are pending or running (as ``gpupool session list``)."""
        jobs = self.jobs(["pending", "scheduled", "running"], limit=1000)
        return [Session(j) for j in jobs if "session" in j.spec]

    def start_session(self, jupyter: bool = True, gpus: Union[int, float, str, None] = 1, *,
                      name: Optional[str] = None, idle_timeout: Optional[str] = None,
                      ports: Optional[Sequence[int]] = None, any_port: bool = False,
                      wait: bool = True, timeout: float = 600.0, **submit_options: Any) -> Session:
        """Starts an interactive session (``gpupool session start``): Jupyter,
        or a shell session (``jupyter=False``) to ``gpupool shell`` into.

        With `wait` it returns once the session runs and, for Jupyter, once its
        notebook server answers through the server's proxy, with a one-time
        sign-in link in ``session.link``. Raises :class:`TimeoutError` if it
        has not started within `timeout` (it stays queued: ``session.stop()``),
        and :class:`~gpupool.GpupoolError` if it ended instead."""
        kind = "jupyter" if jupyter else "shell"
        section: Dict[str, Any] = {"kind": kind}
        if idle_timeout is not None:
            section["idle_timeout"] = idle_timeout
        if ports:
            section["ports"] = list(ports)
        if any_port:
            section["any_port"] = True
        job = self.submit(name=name or kind, gpus=gpus, session=section, **submit_options)
        session = Session(job)
        if not wait:
            return session
        deadline = time.monotonic() + timeout
        state = job.wait(timeout=timeout, until="running")
        if state != "running":
            raise GpupoolError(f"session {job.id} {state}: {job.reason}")
        if jupyter:
            self._wait_for_jupyter(session, deadline)
        return session

    def _wait_for_jupyter(self, session: Session, deadline: float) -> None:
        """Until the notebook server answers through the proxy, on the
        sessions' own address (a link names it), as the CLI waits. Gives up
        quietly when that address cannot be reached from here at all (the
        session runs; Jupyter may need a moment more)."""
        base = session.new_link().url.split("/v1/", 1)[0]
        probe = Transport(base, self.endpoint.token, self.transport.tls.settings, 10.0)
        try:
            while True:
                try:
                    answer = probe.request("GET", f"/v1/sessions/{session.id}/proxy/api/status")
                except Unavailable:
                    return
                if answer.status == 200:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"session {session.id} runs, but Jupyter did not answer in time")
                time.sleep(0.2)
        finally:
            probe.close()
        session.new_link()  # a fresh link, with its whole lifetime ahead
