"""The exceptions of the gpupool client, and how HTTP answers map to them.

Every error the client raises on its own account derives from
:class:`GpupoolError`. Errors the server answers with carry its HTTP status,
its code (``INVALID_ARGUMENT``, ``NOT_FOUND``, ...) and its message, from the
one error shape of the REST API::

    {"error": {"code": "INVALID_ARGUMENT", "message": "resources.gpus: ..."}}

The mapping (docs/api.md, src/server/http_errors.cpp):

======  =====================================================
HTTP    exception
======  =====================================================
400     :class:`BadRequest` (:class:`InvalidSpec` on a submit)
401     :class:`Unauthorized`
403     :class:`Forbidden`
404     :class:`NotFound` (410: :class:`Gone`, a subclass)
409     :class:`Conflict`
413     :class:`TooLarge`
429     :class:`RateLimited`
503     :class:`Unavailable` (also: no connection, no answer)
other   :class:`ServerError`
======  =====================================================
"""
from __future__ import annotations

import json
import re
from typing import Any, Mapping, Optional

__all__ = [
    "GpupoolError", "BadRequest", "InvalidSpec", "Unauthorized", "Forbidden", "NotFound", "Gone",
    "Conflict", "TooLarge", "RateLimited", "Unavailable", "ServerError", "TLSVerificationError",
    "JobFailed", "RemoteError", "error_from_answer",
]


class GpupoolError(Exception):
    """Base of every error of the gpupool client.

    Attributes:
        message: the server's message (or the client's own).
        status: the HTTP status of the answer, or None when there was none.
        code: the server's error code (``"NOT_FOUND"``), or None.
    """

    def __init__(self, message: str, *, status: Optional[int] = None, code: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


class BadRequest(GpupoolError):
    """400: the request was malformed or named something invalid."""


class InvalidSpec(BadRequest):
    """400 on a submission: the job spec was refused.

    Attributes:
        field: the spec field the server named (``"resources.gpus"``), or None
            when its message names none.
    """

    # "resources.gpus: ...", "resources.gpus (line 4): ...", "env[3]: ..."
    _FIELD = re.compile(r"^([A-Za-z_][A-Za-z0-9_.\[\]-]*)(?: \(line \d+\))?: ")

    def __init__(self, message: str, *, status: Optional[int] = 400, code: Optional[str] = None):
        super().__init__(message, status=status, code=code)
        m = self._FIELD.match(message)
        self.field: Optional[str] = m.group(1) if m else None


class Unauthorized(GpupoolError):
    """401: no token, or one the server does not accept."""


class Forbidden(GpupoolError):
    """403: the token may not do this (role, scopes, ownership)."""


class NotFound(GpupoolError):
    """404: no such job, node, checkpoint... (or one the caller may not see)."""


class Gone(NotFound):
    """410: removed for good (a job's log that log retention removed)."""


class Conflict(GpupoolError):
    """409: the request conflicts with the state of things (a job that is not
    running, an idempotency key used with another spec, ...)."""


class TooLarge(GpupoolError):
    """413: the request body is over the server's --max-request-body."""


class RateLimited(GpupoolError):
    """429: a limit of the server (rate, pending jobs, storage quota).

    Attributes:
        retry_after: the server's Retry-After in seconds, or None.
    """

    def __init__(self, message: str, *, status: Optional[int] = 429, code: Optional[str] = None,
                 retry_after: Optional[float] = None):
        super().__init__(message, status=status, code=code)
        self.retry_after = retry_after


class Unavailable(GpupoolError):
    """503, or no answer at all: the server cannot be reached, the connection
    broke, or it did not answer in time."""


class ServerError(GpupoolError):
    """500 and any other status the client does not expect."""


class TLSVerificationError(GpupoolError):
    """The server failed to prove who it is (pin, CA or host name mismatch).

    Retrying will not help; the client never sends a request, nor the token,
    over such a connection.
    """


class JobFailed(GpupoolError):
    """A job an :class:`~gpupool.Executor` ran ended without a result
    (failed before the bootstrap could report, killed, cancelled, lost).

    Attributes:
        job: the :class:`~gpupool.Job` as it ended.
    """

    def __init__(self, message: str, job: Any = None):
        super().__init__(message)
        self.job = job


class RemoteError(GpupoolError):
    """An exception raised by a function an :class:`~gpupool.Executor` ran,
    when the exception itself cannot be brought back (not picklable, or its
    class is not importable here, or results travel as JSON).

    Attributes:
        type_name: the remote exception's class, ``"module.QualName"``.
        remote_message: ``str()`` of the remote exception.
        remote_traceback: the remote traceback, formatted.
        job: the job that ran the function (a :class:`~gpupool.Job`), or None.
    """

    def __init__(self, type_name: str, remote_message: str, remote_traceback: str, job: Any = None):
        super().__init__(f"{type_name}: {remote_message}\n\nRemote traceback:\n{remote_traceback}")
        self.type_name = type_name
        self.remote_message = remote_message
        self.remote_traceback = remote_traceback
        self.job = job


_BY_STATUS = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 410: Gone,
              409: Conflict, 413: TooLarge, 429: RateLimited, 503: Unavailable}


def error_from_answer(status: int, body: bytes, headers: Mapping[str, str],
                      submit: bool = False) -> GpupoolError:
    """The exception for a non-2xx answer: its class by `status`, its message
    and code from the body's ``{"error": {"code", "message"}}``. `submit`: the
    answer to ``POST /v1/jobs``, where a 400 is an :class:`InvalidSpec`."""
    message, code = f"HTTP {status}", None
    try:
        parsed = json.loads(body or b"null")
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        err = parsed.get("error")
        if isinstance(err, dict):
            message = str(err.get("message", message))
            code = err.get("code") if isinstance(err.get("code"), str) else None
        elif isinstance(err, str):  # a standby's 307 body, and the like
            message = err
    if status == 401:
        message += " (check the token: Client(token=...) or GPUPOOL_TOKEN)"
    if status == 400 and submit:
        return InvalidSpec(message, status=status, code=code)
    if status == 429:
        retry = headers.get("retry-after")
        try:
            seconds = float(retry) if retry is not None else None
        except ValueError:
            seconds = None
        return RateLimited(message, status=status, code=code, retry_after=seconds)
    cls = _BY_STATUS.get(status, ServerError)
    return cls(message, status=status, code=code)
