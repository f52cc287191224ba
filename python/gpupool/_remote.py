"""The bootstrap of a call that gpupool.Executor ships to the pool.

This file is uploaded, as ``.gpupool/run.py``, with the job's inputs, beside
``call.pkl`` (the pickled ``(function, args, kwargs)``) and ``call.json``
(``{"nonce": ..., "results": "pickle" | "json", "protocol": N}``), and runs
as ``python3 .gpupool/run.py`` in the job's work directory, which it puts
first on ``sys.path`` (so modules uploaded with the work directory import).
It must run on its own, with the standard library alone (cloudpickle, when
the call was pickled with it, must be importable here too).

It unpickles the call, calls it, and writes the outcome to its stdout, after
everything the function printed, as marked lines the client reads back from
the job's log::

    GPUPOOL-RESULT <nonce> begin <bytes> <sha256>
    GPUPOOL-RESULT <nonce> <index> <base64 of at most 3072 bytes>
    ...
    GPUPOOL-RESULT <nonce> end

The payload is a pickled tuple of plain values, ``("ok", pickle of the
value, "", "", "")`` or ``("error", pickle of the exception or None when it
does not pickle, traceback text, type name, message)``, so that the client
can read an error whose class it cannot import; with ``results: "json"``, the
JSON ``{"ok": value}`` or ``{"error": {"type", "message", "traceback"}}``.
It exits 0 when the function returned, 1 when it raised.
"""
import base64
import hashlib
import json
import os
import pickle
import sys
import traceback

PREFIX = "GPUPOOL-RESULT"
PIECE_BYTES = 3072  # 4096 characters of base64: well under the log's 16 KiB lines


def emit(nonce, payload):
    """Writes `payload` as marked lines on stdout (fd 1, after what the
    function printed)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # the function may have closed them
        pass
    lines = ["%s %s begin %d %s" % (PREFIX, nonce, len(payload), hashlib.sha256(payload).hexdigest())]
    for i in range(0, len(payload), PIECE_BYTES):
        piece = base64.b64encode(payload[i:i + PIECE_BYTES]).decode("ascii")
        lines.append("%s %s %d %s" % (PREFIX, nonce, i // PIECE_BYTES, piece))
    lines.append("%s %s end" % (PREFIX, nonce))
    data = ("\n".join(lines) + "\n").encode("ascii")
    while data:
        n = os.write(1, data)
        data = data[n:]


def dumps(value, protocol):
    try:
        import cloudpickle
        return cloudpickle.dumps(value, protocol=protocol)
    except ImportError:
        return pickle.dumps(value, protocol=protocol)


def type_name(exc):
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else "%s.%s" % (cls.__module__, cls.__qualname__)


def error_payload(exc, tb, results, protocol):
    if results == "json":
        return json.dumps({"error": {"type": type_name(exc), "message": str(exc),
                                     "traceback": tb}}).encode("utf-8")
    try:
        exc_bytes = dumps(exc, protocol)
    except Exception:  # an exception that does not pickle: its text comes back
        exc_bytes = None
    return pickle.dumps(("error", exc_bytes, tb, type_name(exc), str(exc)), protocol=protocol)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "call.json"), encoding="utf-8") as f:
        meta = json.load(f)
    nonce, results, protocol = meta["nonce"], meta.get("results", "pickle"), int(meta.get("protocol", 4))
    sys.path.insert(0, os.getcwd())
    try:
        try:
            __import__("cloudpickle")  # its pickles name its functions
        except ImportError:
            pass
        with open(os.path.join(here, "call.pkl"), "rb") as f:
            fn, args, kwargs = pickle.load(f)
        value = fn(*args, **kwargs)
        if results == "json":
            payload = json.dumps({"ok": value}).encode("utf-8")
        else:
            payload = pickle.dumps(("ok", dumps(value, protocol), "", "", ""), protocol=protocol)
    except BaseException as exc:  # noqa: B902 (SystemExit and KeyboardInterrupt come back too)
        emit(nonce, error_payload(exc, traceback.format_exc(), results, protocol))
        return 1
    emit(nonce, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
