"""Manifests: what one checkpoint or one job-input tree holds, as the pool
encodes and checks them (src/blob/manifest.h).

A manifest is a list of entries (files, directories, symlinks) and, for each
file, the chunks its bytes are made of, in order. Its id is the SHA-256 of
its text, which is written exactly as the CLI writes it (keys sorted,
compact, UTF-8), so the same tree gets the same id from either. Decoding is
strict, because a manifest decides where files are written when a tree is
restored: relative paths of non-empty components other than "." and "..",
each once, under directories listed before them; symlink targets that stay
inside; chunk sizes that sum to the file's size.

Pure functions.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from . import _chunks
from .errors import BadRequest, GpupoolError

__all__ = ["Entry", "Manifest", "encode_manifest", "validate_manifest", "decode_manifest", "parent_of"]

_MAX_PATH = 4096


@dataclass
class Entry:
    """One manifest entry. `chunks` holds (id, size) pairs for a file."""

    path: str
    type: str  # "file", "dir" or "symlink"
    mode: int = 0o644
    size: int = 0
    chunks: List[Tuple[str, int]] = field(default_factory=list)
    target: str = ""

    def to_json(self) -> dict:
        j: dict = {"path": self.path, "type": self.type}
        if self.type != "symlink":
            j["mode"] = self.mode
        if self.type == "file":
            j["size"] = self.size
            j["chunks"] = [[cid, size] for cid, size in self.chunks]
        if self.type == "symlink":
            j["target"] = self.target
        return j


@dataclass
class Manifest:
    """A tree: its entries, each directory before what lies under it."""

    entries: List[Entry]

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries if e.type == "file")


def encode_manifest(m: Manifest) -> bytes:
    """The manifest's text as the CLI writes it (keys sorted, compact)."""
    return json.dumps({"version": 1, "entries": [e.to_json() for e in m.entries]}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def parent_of(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def _check_relative(path: str) -> Optional[str]:
    if not path:
        return "must not be empty"
    if len(path.encode("utf-8", "surrogateescape")) > _MAX_PATH:
        return "is too long"
    if path.startswith("/"):
        return "must be relative"
    if "\0" in path:
        return "must not contain NUL"
    for part in path.split("/"):
        if not part:
            return "must not contain empty components"
        if part in (".", ".."):
            return 'must not contain "." or ".." components'
    return None


def _target_stays_inside(path: str, target: str) -> bool:
    if not target or target.startswith("/"):
        return False
    parent = parent_of(path)
    depth = parent.count("/") + 1 if parent else 0
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part and part != ".":
            depth += 1
    return True


def validate_manifest(m: Manifest) -> None:
    """The rules the server and the CLI enforce (ValidateManifest); raises
    :class:`~gpupool.BadRequest` naming the entry."""
    paths, dirs = set(), set()
    for i, e in enumerate(m.entries):
        def fail(what: str, why: str) -> None:
            raise BadRequest(f"entries[{i}].{what}: {why}")
        why = _check_relative(e.path)
        if why:
            fail("path", why)
        if e.path in paths:
            fail("path", "is listed twice")
        paths.add(e.path)
        parent = parent_of(e.path)
        if parent and parent not in dirs:
            fail("path", f'lies under "{parent}", which is not listed before it as a dir')
        if e.type != "symlink" and not 0 <= e.mode <= 0o777:
            fail("mode", "must be from 0 to 0777")
        if e.type == "file":
            total = 0
            for c, (cid, size) in enumerate(e.chunks):
                if not (isinstance(cid, str) and len(cid) == 64 and all(x in "0123456789abcdef" for x in cid)):
                    fail(f"chunks[{c}]", "not a SHA-256 chunk id")
                if not isinstance(size, int) or not 0 < size <= _chunks.MAX_CHUNK_BYTES:
                    fail(f"chunks[{c}]", "chunk size out of range")
                total += size
            if total != e.size:
                fail("size", f"is {e.size} but its chunks hold {total} bytes")
        elif e.type == "dir":
            dirs.add(e.path)
        elif e.type == "symlink":
            if "\0" in e.target:
                fail("target", "must not contain NUL")
            if not _target_stays_inside(e.path, e.target):
                fail("target", "must be a relative path that stays inside the tree")
        else:
            fail("type", "must be file, dir or symlink")


def decode_manifest(text: bytes) -> Manifest:
    """A manifest from its text, strictly checked."""
    try:
        j = json.loads(text)
    except ValueError as e:
        raise GpupoolError(f"manifest: not JSON: {e}") from None
    if not isinstance(j, dict) or j.get("version") != 1 or not isinstance(j.get("entries"), list):
        raise GpupoolError("manifest: want {\"version\": 1, \"entries\": [...]}")
    entries = []
    for i, ej in enumerate(j["entries"]):
        if not isinstance(ej, dict) or not isinstance(ej.get("path"), str):
            raise GpupoolError(f"manifest: entries[{i}] is malformed")
        kind = ej.get("type")
        e = Entry(path=ej["path"], type=kind if isinstance(kind, str) else "?")
        if e.type != "symlink":
            mode = ej.get("mode", 0o755 if e.type == "dir" else 0o644)
            e.mode = mode & 0o777 if isinstance(mode, int) and 0 <= mode <= 0o7777 else -1
        if e.type == "file":
            e.size = ej.get("size") if isinstance(ej.get("size"), int) else -1
            chunks = ej.get("chunks")
            if not isinstance(chunks, list) or not all(isinstance(c, list) and len(c) == 2 for c in chunks):
                raise GpupoolError(f"manifest: entries[{i}].chunks: must be [[id, size], ...]")
            e.chunks = [(c[0], c[1]) for c in chunks]
        elif e.type == "symlink":
            e.target = ej.get("target") if isinstance(ej.get("target"), str) else ""
        entries.append(e)
    m = Manifest(entries)
    try:
        validate_manifest(m)
    except BadRequest as err:
        raise GpupoolError(f"manifest: {err.message}") from None
    return m
