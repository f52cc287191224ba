"""gpupool: a Python client for a gpupool pool (issue 25).

Submit jobs, follow their logs, wait for them, download their checkpoints,
start interactive sessions, and run Python functions on the pool's GPUs
through a :class:`concurrent.futures.Executor`. Standard library only;
``zstandard`` (Debian: python3-zstandard) is needed to download checkpoints
and compresses uploads when present; ``cloudpickle`` (python3-cloudpickle),
when present, lets the :class:`Executor` ship functions by value.

    import gpupool

    pool = gpupool.Client.from_config()
    job = pool.submit(command=["nvidia-smi"], gpus=1)
    for line in job.logs(follow=True):
        print(line)

See docs/python-client.md.
"""
__version__ = "0.1.0"

from .client import Client  # noqa: E402
from .errors import (  # noqa: E402
    BadRequest, Conflict, Forbidden, Gone, GpupoolError, InvalidSpec, JobFailed, NotFound,
    RateLimited, RemoteError, ServerError, TLSVerificationError, TooLarge, Unauthorized,
    Unavailable)
from .executor import Executor, JobFuture  # noqa: E402
from .jobs import Checkpoint, Job, LogLine, Session, SessionLink  # noqa: E402

__all__ = [
    "Client", "Executor", "JobFuture", "Job", "LogLine", "Checkpoint", "Session", "SessionLink",
    "GpupoolError", "BadRequest", "InvalidSpec", "Unauthorized", "Forbidden", "NotFound", "Gone",
    "Conflict", "TooLarge", "RateLimited", "Unavailable", "ServerError", "TLSVerificationError",
    "JobFailed", "RemoteError", "__version__",
]
