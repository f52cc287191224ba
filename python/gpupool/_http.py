"""Blocking HTTP/1.1 to a pool's servers, following the rules of the CLI
(src/net/http_client.h, src/net/server_list.h).

A pool may be reached through several servers, given as a comma-separated
list of URLs (``"https://a:8470,https://b:8470"``): one leads, the others
stand by and redirect to it. :class:`Transport` then

* tries the servers in turn, starting with the one that answered last, and
  goes on to the next when one cannot be reached (any failure for GET and
  HEAD; for other methods only a failure to connect, so that a request a
  server may have received is never sent twice, unless the caller marked
  it repeatable: blob transfers, a cancel, a submission with an
  idempotency key), or answers 503 (a standby with no leader yet);
* follows a 307 once, and only to a server of the list (a standby naming the
  leader): a redirect anywhere else is returned as it is, so that the token
  goes only to the servers the caller named.

Connections are kept open between calls (HTTP/1.1 keep-alive, at most 16
idle ones, each for at most 30 s; the server closes idle ones after 120 s).
A call that fails on a kept connection before any answer (the server closed
it meanwhile) is made again on a new connection, once, unless it was sent
and is not idempotent: a POST that may have been acted on fails
(:class:`~gpupool.Unavailable`) rather than run twice.

Thread-safety: a Transport may be shared by threads (each call takes its
own connection; the idle list and the sticky server are guarded by a lock).
"""
from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from . import __version__
from ._tls import NotConnected as _NotConnected
from ._tls import TlsPolicy, TlsSettings
from .errors import BadRequest, GpupoolError, TLSVerificationError, Unavailable

__all__ = ["Answer", "Transport", "split_server_list"]

MAX_IDLE_SECONDS = 30.0
MAX_IDLE_CONNECTIONS = 16


@dataclass
class Answer:
    """An HTTP answer: status, headers (names in lower case), body, and the
    server (base URL) that gave it."""

    status: int
    headers: Dict[str, str]
    body: bytes
    server: str


@dataclass(frozen=True)
class _Url:
    scheme: str
    host: str
    port: int
    path: str  # a prefix for every target, without the trailing '/'


def _parse_url(url: str) -> _Url:
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise BadRequest(f'invalid server URL "{url}" (want http://host:port or https://host:port)')
    try:
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        raise BadRequest(f'invalid server URL "{url}": bad port') from None
    return _Url(u.scheme, u.hostname, port, u.path.rstrip("/"))


def split_server_list(text: str) -> List[str]:
    """The URLs of a list: spaces around commas, trailing slashes and empty
    items are dropped."""
    out = []
    for item in text.split(","):
        item = item.strip(" ").rstrip(" /")
        if item:
            out.append(item)
    return out


def _server_of(servers: List[str], location: str) -> Optional[int]:
    """The index of the server `location` points into, or None."""
    for i, s in enumerate(servers):
        if location.startswith(s) and (len(location) == len(s) or location[len(s)] == "/"):
            return i
    return None


class _Connection(http.client.HTTPConnection):
    """One connection to one server, TLS as the policy says."""

    def __init__(self, base: str, url: _Url, tls: Optional[TlsPolicy], timeout: float):
        super().__init__(url.host, url.port, timeout=timeout)
        self.base = base
        self._url = url
        self._tls = tls
        self.idle_since = 0.0

    def connect(self) -> None:
        u = self._url
        if u.scheme == "https":
            assert self._tls is not None
            self._tls.prepare(u.host, u.port, self.base, self.timeout)
        try:
            raw = socket.create_connection((u.host, u.port), timeout=self.timeout)
        except socket.gaierror as e:
            raise _NotConnected(f"cannot resolve {u.host}: {e}") from None
        except OSError as e:
            raise _NotConnected(f"cannot connect to {self.base}: {e}") from None
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if u.scheme == "https":
            assert self._tls is not None
            self.sock = self._tls.wrap(raw, u.host, u.port, self.base, self.timeout)
        else:
            self.sock = raw


class Transport:
    """Requests to a pool given as one URL or a list (see the module's doc).

    Args:
        servers: ``"https://host:8470"`` or ``"https://a:8470,https://b:8470"``.
        token: sent as ``Authorization: Bearer`` (empty: none).
        tls: how https servers are checked.
        timeout: the default seconds a call may wait on the network.
    """

    def __init__(self, servers: str, token: str = "", tls: TlsSettings = TlsSettings(),
                 timeout: float = 30.0):
        self.servers = split_server_list(servers)
        if not self.servers:
            raise BadRequest(f'no server URL in "{servers}"')
        self.urls = {s: _parse_url(s) for s in self.servers}
        self.token = token
        self.timeout = timeout
        self.tls = TlsPolicy(tls)
        self._lock = threading.Lock()
        self._sticky = 0
        self._idle: List[_Connection] = []

    # ---- the server list ----
    def last_answered(self) -> str:
        """The server of the list that answered last (the first before any did)."""
        with self._lock:
            return self.servers[self._sticky % len(self.servers)]

    def request(self, method: str, target: str, body: Optional[bytes] = None,
                headers: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                idempotent: Optional[bool] = None) -> Answer:
        """One call, answered with any HTTP status. `idempotent`: whether the
        request may be sent twice (default: GET, HEAD, PUT and DELETE may;
        a caller marks a POST that may, such as a blob upload). Raises
        :class:`~gpupool.Unavailable` when no server answered, and
        :class:`~gpupool.TLSVerificationError` when one failed the TLS check."""
        if not target.startswith("/"):
            raise BadRequest(f'request target must start with "/": "{target}"')
        marked = bool(idempotent)
        idempotent = marked or method in ("GET", "HEAD", "PUT", "DELETE")
        servers = self.servers
        if len(servers) == 1:
            return self._one(servers[0], method, target, body, headers, timeout, idempotent)
        with self._lock:
            start = self._sticky % len(servers)
        last: object = Unavailable(f"no server of {','.join(servers)} answered")
        followed = False
        for k in range(len(servers)):
            i = (start + k) % len(servers)
            try:
                answer = self._one(servers[i], method, target, body, headers, timeout, idempotent)
                if answer.status == 307 and not followed:
                    to = _server_of(servers, answer.headers.get("location", ""))
                    if to is not None:
                        followed, i = True, to
                        answer = self._one(servers[to], method, target, body, headers, timeout,
                                           idempotent)
            except GpupoolError as e:
                if not self._safe_to_retry(method, marked, e):
                    raise
                last = e
                continue
            if answer.status != 503:
                if answer.status != 307:
                    with self._lock:
                        self._sticky = i
                return answer
            last = answer
        if isinstance(last, Answer):
            return last
        assert isinstance(last, BaseException)
        raise last

    @staticmethod
    def _safe_to_retry(method: str, marked: bool, e: GpupoolError) -> bool:
        """Whether a failed call may go on to the next server (the CLI's
        rule: GET and HEAD after any failure to get an answer, others only
        when nothing was sent, unless the caller marked them repeatable)."""
        if isinstance(e, TLSVerificationError):
            return False
        if method in ("GET", "HEAD") or marked:
            return isinstance(e, Unavailable)
        return isinstance(e, _NotConnected)

    # ---- one server ----
    def _take_idle(self, base: str) -> Optional[_Connection]:
        now = time.monotonic()
        with self._lock:
            keep, found = [], None
            for c in self._idle:
                if now - c.idle_since > MAX_IDLE_SECONDS:
                    c.close()
                elif found is None and c.base == base:
                    found = c
                else:
                    keep.append(c)
            self._idle = keep
            return found

    def _give_back(self, c: _Connection) -> None:
        with self._lock:
            if len(self._idle) >= MAX_IDLE_CONNECTIONS:
                c.close()
                return
            c.idle_since = time.monotonic()
            self._idle.append(c)

    def close(self) -> None:
        """Closes the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def _one(self, base: str, method: str, target: str, body: Optional[bytes],
             headers: Optional[Mapping[str, str]], timeout: Optional[float], idempotent: bool) -> Answer:
        url = self.urls[base]
        t = self.timeout if timeout is None else timeout
        hdrs = {"User-Agent": f"gpupool-python/{__version__}"}
        if self.token:
            hdrs["Authorization"] = "Bearer " + self.token
        if body is not None and not any(k.lower() == "content-type" for k in (headers or {})):
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        for attempt in range(2):
            conn = self._take_idle(base)
            reused = conn is not None
            if conn is None:
                conn = _Connection(base, url, self.tls, t)
                conn.connect()  # _NotConnected, TLSVerificationError, Unavailable
            conn.timeout = t
            if conn.sock is not None:
                conn.sock.settimeout(t)
            sent = answered = False
            try:
                conn.request(method, url.path + target, body=body, headers=hdrs)
                sent = True
                resp = conn.getresponse()
                answered = True
                data = resp.read()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                stale = reused and not answered and not isinstance(e, socket.timeout)
                if stale and attempt == 0 and not (sent and not idempotent):
                    continue
                if isinstance(e, socket.timeout):
                    raise Unavailable(f"{method} {base}{target}: no response within {t:g} s") from None
                what = "no response from" if sent else "cannot send the request to"
                raise Unavailable(f"{what} {base}: {e or type(e).__name__}") from None
            answer = Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data, base)
            if resp.will_close:
                conn.close()
            else:
                self._give_back(conn)
            return answer
        raise AssertionError("unreachable")


def query(**params: object) -> str:
    """``"?a=1&b=x"`` of the params that are not None (``""`` when none)."""
    items: List[Tuple[str, str]] = []
    for k, v in params.items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = "1" if v else "0"
        elif isinstance(v, (list, tuple, set)):
            v = ",".join(str(x) for x in v)
        items.append((k, str(v)))
    return "?" + urllib.parse.urlencode(items) if items else ""
