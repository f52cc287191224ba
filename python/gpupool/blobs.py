"""Directory trees into the pool's blob store and back, as the CLI does
(src/blob/tree.h, src/blob/manifest.h, docs/checkpoints.md).

A tree is stored as content-addressed chunks plus a manifest: a JSON list of
entries (files, directories, symlinks) and, for each file, the chunks its
bytes are made of. A manifest's id is the SHA-256 of its text, which the
client writes exactly as the CLI does, so the same directory uploaded by
either has the same manifest id and shares every chunk::

    {"entries":[{"mode":493,"path":"model","type":"dir"},
                {"chunks":[["3f9a...",65536]],"mode":420,"path":"model/w.pt",
                 "size":65536,"type":"file"}],"version":1}

:func:`upload_tree` walks a directory (.gpupoolignore applies; symlinks are
stored as links and never followed; sockets, devices and fifos are left
out), asks the server which chunks it lacks, uploads only those, and PUTs
the manifest last. :func:`restore_tree` writes a manifest's tree into an
empty directory, verifying every chunk; it never writes through a link nor
outside the directory.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Protocol, Tuple

from . import _chunks
from ._ignore import IGNORE_FILE, IgnoreRules
from ._http import Answer
from ._manifest import Entry, Manifest, decode_manifest, encode_manifest, parent_of, validate_manifest
from .errors import BadRequest, GpupoolError

__all__ = ["Entry", "Manifest", "UploadResult", "upload_tree", "restore_tree", "fetch_manifest",
           "CHECKPOINT_DIR"]

CHECKPOINT_DIR = ".checkpoints"  # reserved in a job's work directory
_BATCH_BYTES = 32 << 20  # chunk bytes held before asking the server which it lacks
_MAX_IDS = 100_000  # ids per /v1/blobs/missing request
_FETCH_WINDOW = 2048  # ids per /v1/blobs/chunks/fetch request
_MAX_DEPTH = 2048


class Api(Protocol):
    """What the blob functions need of a :class:`~gpupool.Client`."""

    def call(self, method: str, target: str, body: Any = None, *,
             idempotent: Optional[bool] = None) -> Any: ...

    def call_raw(self, method: str, target: str, body: Optional[bytes] = None, *,
                 content_type: Optional[str] = None, idempotent: Optional[bool] = None) -> Answer: ...


@dataclass
class UploadResult:
    """What an upload did: the manifest id (a job's ``inputs``), files and
    bytes of the tree, chunks the server lacked and got, and the bytes sent."""

    manifest: str
    files: int = 0
    bytes: int = 0
    new_chunks: int = 0
    uploaded_bytes: int = 0


# ---- upload ----------------------------------------------------------------

class _Uploader:
    """Chunks waiting to be offered to the server, in batches: only those it
    lacks are compressed and sent, in bodies of at most 8 MiB."""

    def __init__(self, api: Api, raw_frames: bool):
        self.api = api
        self.raw = raw_frames
        self.pending: Dict[str, bytes] = {}
        self.held = 0
        self.result = UploadResult("")

    def add(self, data: bytes) -> str:
        """Queues a chunk (once per batch); returns its id."""
        cid = _chunks.chunk_id(data)
        if cid not in self.pending:
            self.pending[cid] = data
            self.held += len(data)
            if self.held >= _BATCH_BYTES:
                self.flush()
        return cid

    def flush(self) -> None:
        """Asks which queued chunks the server lacks and uploads those."""
        ids = list(self.pending)
        missing: List[str] = []
        for start in range(0, len(ids), _MAX_IDS):
            answer = self.api.call("POST", "/v1/blobs/missing", {"chunks": ids[start:start + _MAX_IDS]},
                                   idempotent=True)
            missing += answer.get("missing", [])
        body: List[Tuple[str, bytes]] = []
        size = 0
        for cid in dict.fromkeys(missing):
            frame = _chunks.compress(self.pending[cid], raw=self.raw)
            record = len(frame) + 80
            if body and size + record > _chunks.MAX_RECORDS_BYTES:
                self._send(body)
                body, size = [], 0
            body.append((cid, frame))
            size += record
            self.result.new_chunks += 1
            self.result.uploaded_bytes += len(frame)
        if body:
            self._send(body)
        self.pending.clear()
        self.held = 0

    def _send(self, frames: List[Tuple[str, bytes]]) -> None:
        self.api.call_raw("POST", "/v1/blobs/chunks", _chunks.encode_records(frames),
                          content_type=_chunks.CHUNK_RECORDS_TYPE, idempotent=True)


def _name_text(name: str, where: str) -> str:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"{where}: the name {name!r} is not valid UTF-8") from None
    return name


def _walk(root: str, rules: IgnoreRules, up: _Uploader, m: Manifest) -> None:
    """Pre-order walk through directory descriptors; no symlink is followed
    below `root`, and an entry that changes between its listing and its
    opening is left out."""
    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    stack: List[Tuple[int, str, Iterator[str]]] = []

    def push(fd: int, rel: str) -> None:
        if len(stack) > _MAX_DEPTH:
            raise BadRequest(f"{rel}: the tree is too deep")
        names = sorted(os.listdir(fd), key=lambda n: n.encode("utf-8", "surrogateescape"))
        stack.append((fd, rel, iter(names)))

    push(top, "")
    try:
        while stack:
            fd, rel, names = stack[-1]
            name = next(names, None)
            if name is None:
                os.close(fd)
                stack.pop()
                continue
            path = (rel + "/" if rel else "") + _name_text(name, rel or root)
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            if rules.ignored(path, is_dir):
                continue
            if stat.S_ISLNK(st.st_mode):
                m.entries.append(Entry(path, "symlink", 0, target=os.readlink(name, dir_fd=fd)))
                continue
            if not is_dir and not stat.S_ISREG(st.st_mode):
                continue  # sockets, devices, fifos
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if is_dir else os.O_NONBLOCK)
            try:
                child = os.open(name, flags, dir_fd=fd)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as e:
                if e.errno == 40:  # ELOOP: became a symlink meanwhile
                    continue
                raise BadRequest(f"{path}: {e.strerror}") from None
            now = os.fstat(child)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                os.close(child)
                continue  # changed while being read
            entry = Entry(path, "dir" if is_dir else "file", st.st_mode & 0o777)
            m.entries.append(entry)
            if is_dir:
                push(child, path)
                continue
            with os.fdopen(child, "rb", buffering=0) as f:
                for piece in _chunks.iter_chunks(f.read, st.st_size):
                    entry.chunks.append((up.add(piece), len(piece)))
                    entry.size += len(piece)
            up.result.files += 1
            up.result.bytes += entry.size
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _check_uploadable(m: Manifest) -> None:
    """What the pool would refuse later, said now in terms of the directory."""
    for e in m.entries:
        if e.path == CHECKPOINT_DIR and e.type != "dir":
            raise BadRequest(f"{CHECKPOINT_DIR} is reserved for the job's checkpoints and must be an "
                             f"empty directory, not a file or a link: remove it or add it to {IGNORE_FILE}")
        if e.path.startswith(CHECKPOINT_DIR + "/"):
            raise BadRequest(f"{CHECKPOINT_DIR} is reserved for the job's checkpoints and must be empty: "
                             f"remove {e.path} or add {CHECKPOINT_DIR}/ to {IGNORE_FILE}")
    try:
        validate_manifest(m)
    except BadRequest as err:
        message = err.message
        if message.startswith("entries["):
            e = m.entries[int(message[8:message.index("]")])]
            link = f" (a link to {e.target})" if e.type == "symlink" else ""
            message = f"{e.path}{link}: {message} (remove it or add it to {IGNORE_FILE})"
        raise BadRequest(message) from None


def upload_tree(api: Api, directory: Optional[str], extra_files: Optional[Mapping[str, bytes]] = None,
                raw_frames: bool = False) -> UploadResult:
    """Uploads `directory` (None: an empty tree) plus `extra_files` (relative
    path -> bytes, added after the directory's entries with the directories
    they need) and stores the manifest. `api` is the client (its ``call``
    and ``call_raw``). `raw_frames`: send chunks uncompressed even when
    zstandard is there. Raises :class:`~gpupool.BadRequest` naming the
    directory's problem, or the API's errors."""
    up = _Uploader(api, raw_frames)
    m = Manifest([])
    where = directory or "extra files"
    try:
        if directory is not None:
            if not os.path.isdir(directory):
                raise BadRequest("is not a directory")
            _walk(directory, IgnoreRules.for_dir(directory), up, m)
        known = {e.path for e in m.entries}
        for path, data in (extra_files or {}).items():
            parts = path.split("/")
            for k in range(1, len(parts)):
                d = "/".join(parts[:k])
                if d not in known:
                    m.entries.append(Entry(d, "dir", 0o755))
                    known.add(d)
            if path in known:
                raise BadRequest(f"{path} already exists in {where}")
            entry = Entry(path, "file", 0o644)
            for piece in _chunks.iter_chunks(_Reader(data).read, len(data)):
                entry.chunks.append((up.add(piece), len(piece)))
                entry.size += len(piece)
            m.entries.append(entry)
            known.add(path)
            up.result.files += 1
            up.result.bytes += entry.size
        _check_uploadable(m)
        up.flush()
    except OSError as e:
        raise BadRequest(f"workdir {where}: {e}") from None
    except BadRequest as e:  # said in terms of the directory, as the CLI says it
        raise BadRequest(f"workdir {where}: {e.message}", status=e.status, code=e.code) from None
    text = encode_manifest(m)
    mid = hashlib.sha256(text).hexdigest()
    api.call_raw("PUT", f"/v1/blobs/manifests/{mid}", text, content_type="application/json")
    up.result.manifest = mid
    return up.result


class _Reader:
    """read(n) over bytes in memory."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def read(self, n: int) -> bytes:
        out = self.data[self.pos:self.pos + n]
        self.pos += len(out)
        return out


# ---- download --------------------------------------------------------------

def fetch_manifest(api: Api, mid: str) -> Manifest:
    """The manifest `mid`, checked to hash to its id and to be well formed."""
    text = api.call_raw("GET", f"/v1/blobs/manifests/{mid}").body
    if hashlib.sha256(text).hexdigest() != mid:
        raise GpupoolError(f"manifest {mid[:12]}: the text the server sent does not match its id")
    return decode_manifest(text)


def _fetch_chunks(api: Api, ids: List[str]) -> Iterator[Tuple[str, bytes]]:
    """The chunks' bytes in the order of `ids`, each verified."""
    begin = 0
    while begin < len(ids):
        window = ids[begin:begin + _FETCH_WINDOW]
        answer = api.call_raw("POST", "/v1/blobs/chunks/fetch", json.dumps({"chunks": window}).encode(),
                              content_type="application/json", idempotent=True)
        records = list(_chunks.decode_records(answer.body))
        if not records or len(records) > len(window):
            raise GpupoolError("POST /v1/blobs/chunks/fetch: the server sent no chunks or too many")
        for i, (cid, frame) in enumerate(records):
            if cid != window[i]:
                raise GpupoolError(f"POST /v1/blobs/chunks/fetch: records[{i}] is not the chunk asked for")
            yield cid, _chunks.open_chunk(cid, frame)
        begin += len(records)


def _open_dir(root_fd: int, path: str) -> int:
    """A descriptor of directory `path` beneath root_fd, no link followed."""
    fd = os.dup(root_fd)
    for part in [p for p in path.split("/") if p]:
        try:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd


def restore_tree(api: Api, m: Manifest, dest: str) -> None:
    """Writes the tree of `m` into `dest`, which must not exist or be an
    empty directory. On failure nothing is left there."""
    if os.path.lexists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise BadRequest(f"{dest} exists and is not an empty directory (nothing there is overwritten)")
    existed = os.path.isdir(dest)
    os.makedirs(dest, exist_ok=True)
    root = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _restore(api, m, root)
    except BaseException:
        import shutil
        if existed:
            for name in os.listdir(dest):
                p = os.path.join(dest, name)
                shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
        else:
            shutil.rmtree(dest, ignore_errors=True)
        raise
    finally:
        os.close(root)


def _restore(api: Api, m: Manifest, root: int) -> None:
    order = list(dict.fromkeys(cid for e in m.entries if e.type == "file" for cid, _ in e.chunks))
    uses: Dict[str, int] = {}
    for e in m.entries:
        for cid, _ in e.chunks:
            uses[cid] = uses.get(cid, 0) + 1
    chunks = _fetch_chunks(api, order)
    cache: Dict[str, bytes] = {}  # chunks used again later
    for e in m.entries:
        if e.type == "symlink":
            continue
        parent, name = parent_of(e.path), e.path.rsplit("/", 1)[-1]
        pfd = _open_dir(root, parent)
        try:
            if e.type == "dir":
                os.mkdir(name, 0o700, dir_fd=pfd)
                continue
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=pfd)
            with os.fdopen(fd, "wb") as f:
                for cid, size in e.chunks:
                    if cid in cache:
                        data = cache[cid]
                    else:
                        got, data = next(chunks)
                        assert got == cid, "chunks arrive in first-use order"
                    if len(data) != size:
                        raise GpupoolError(f"{e.path}: chunk {cid[:12]} holds {len(data)} bytes, "
                                           f"the manifest says {size}")
                    f.write(data)
                    uses[cid] -= 1
                    if uses[cid] > 0:
                        cache[cid] = data
                    else:
                        cache.pop(cid, None)
                os.fchmod(f.fileno(), e.mode)
        finally:
            os.close(pfd)
    for e in m.entries:  # links last, so nothing is written through one
        if e.type == "symlink":
            pfd = _open_dir(root, parent_of(e.path))
            try:
                os.symlink(e.target, e.path.rsplit("/", 1)[-1], dir_fd=pfd)
            finally:
                os.close(pfd)
    for e in reversed(m.entries):  # modes last, so a read-only dir is filled first
        if e.type == "dir":
            dfd = _open_dir(root, e.path)
            try:
                os.fchmod(dfd, e.mode)
            finally:
                os.close(dfd)
