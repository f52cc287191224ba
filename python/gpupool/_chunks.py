"""Chunks as the pool stores them: content-defined cut points (FastCDC, the
same cut points as the CLI and the agent, src/blob/chunker.h), zstd frames,
and the chunk-record bodies of the blob API (src/blob/chunk_records.h).

A chunk is named by the SHA-256 of its bytes (64 lowercase hex digits) and
travels as one zstd frame that states its content size. With the
``zstandard`` package (Debian: python3-zstandard) frames are compressed;
without it they are written as zstd *raw* blocks (valid frames, no
compression), which the server accepts alike. Reading frames (downloading
a checkpoint) needs ``zstandard``.

Pure functions but for the optional import; safe from any thread.
"""
from __future__ import annotations

import hashlib
import re
import struct
from typing import Callable, Iterator, List, Optional, Tuple

from .errors import GpupoolError

try:  # optional: Debian's python3-zstandard
    import zstandard as _zstd
except ImportError:  # pragma: no cover - depends on the machine
    _zstd = None

__all__ = ["MIN_SIZE", "AVG_SIZE", "MAX_SIZE", "MAX_CHUNK_BYTES", "next_chunk_length", "chunk_id",
           "compress", "open_chunk", "encode_records", "decode_records", "has_zstd",
           "CHUNK_RECORDS_TYPE", "MAX_RECORDS_BYTES"]

# The chunker's options for checkpoints and job inputs (ChunkerOptions).
MIN_SIZE = 4 * 1024
AVG_SIZE = 16 * 1024
MAX_SIZE = 64 * 1024
MAX_CHUNK_BYTES = 64 << 20  # the largest chunk a reader accepts
CHUNK_RECORDS_TYPE = "application/x-gpupool-chunks"
MAX_RECORDS_BYTES = 8 << 20  # what a sender puts in one request body at most

_M64 = (1 << 64) - 1


def _gear_table() -> List[int]:
    """256 constants: splitmix64 seeded with "gpupool1" (part of the on-disk
    format: never change)."""
    state, table = 0x677075706F6F6C31, []
    for _ in range(256):
        state = (state + 0x9E3779B97F4A7C15) & _M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        table.append(z ^ (z >> 31))
    return table


_GEAR = _gear_table()


def _top_bits(bits: int) -> int:
    return (_M64 << (64 - bits)) & _M64


_BITS = AVG_SIZE.bit_length() - 1
_STRICT = _top_bits(_BITS + 2)
_LOOSE = _top_bits(_BITS - 2)


def next_chunk_length(data: bytes, start: int = 0) -> int:
    """The length of the chunk of `data` that begins at `start`: a
    content-defined cut point in (MIN_SIZE, MAX_SIZE], or all that is left
    when that is no more than MIN_SIZE (or has no cut point). Give at least
    MAX_SIZE bytes from `start`, or all that is left of the file."""
    n = len(data) - start
    if n <= MIN_SIZE:
        return n
    if n > MAX_SIZE:
        n = MAX_SIZE
    normal = n if n < AVG_SIZE else AVG_SIZE
    gear, h = _GEAR, 0
    # Normalized chunking, level 2: a stricter mask before AVG_SIZE, a looser
    # one after. The hash starts at 0 after the skipped MIN_SIZE bytes.
    for i in range(start + MIN_SIZE, start + normal):
        h = ((h << 1) + gear[data[i]]) & _M64
        if not h & _STRICT:
            return i + 1 - start
    for i in range(start + normal, start + n):
        h = ((h << 1) + gear[data[i]]) & _M64
        if not h & _LOOSE:
            return i + 1 - start
    return n


def chunk_id(data: bytes) -> str:
    """A chunk's id: the SHA-256 of its bytes, lowercase hex."""
    return hashlib.sha256(data).hexdigest()


def has_zstd() -> bool:
    """Whether the zstandard package is importable (needed to read chunks)."""
    return _zstd is not None


def _raw_frame(data: bytes) -> bytes:
    """A zstd frame of `data` in raw blocks (RFC 8878): magic, a header with
    the single-segment flag and an 8-byte content size, then blocks of at
    most 128 KiB, the last one flagged."""
    out = bytearray(struct.pack("<IB", 0xFD2FB528, 0xE0))  # FCS 8 bytes, single segment
    out += struct.pack("<Q", len(data))
    block = 128 * 1024
    pos = 0
    while True:
        piece = data[pos:pos + block]
        pos += len(piece)
        last = pos >= len(data)
        header = (len(piece) << 3) | (0 << 1) | (1 if last else 0)  # type 0: raw
        out += struct.pack("<I", header)[:3] + piece
        if last:
            return bytes(out)


def compress(data: bytes, level: int = 3, raw: bool = False) -> bytes:
    """One zstd frame of `data`, with its content size; raw blocks when
    zstandard is missing or `raw` is set."""
    if _zstd is None or raw:
        return _raw_frame(data)
    return _zstd.ZstdCompressor(level=level, write_content_size=True).compress(data)


def open_chunk(cid: str, frame: bytes, max_bytes: int = MAX_CHUNK_BYTES) -> bytes:
    """The chunk's bytes from its zstd frame, checked against its id (as
    OpenChunk). Raises :class:`~gpupool.GpupoolError` for a corrupt frame or
    one whose bytes do not hash to `cid`."""
    if _zstd is None:
        raise GpupoolError("reading chunks needs the zstandard package (Debian: apt-get install "
                           "python3-zstandard; elsewhere: pip install zstandard)")
    try:
        size = _zstd.frame_content_size(frame)
    except _zstd.ZstdError:
        raise GpupoolError(f"chunk {cid[:12]}: not a zstd frame") from None
    if size < 0:
        raise GpupoolError(f"chunk {cid[:12]}: the zstd frame does not give its size")
    if size > max_bytes:
        raise GpupoolError(f"chunk {cid[:12]}: claims {size} bytes, over the limit")
    try:
        data = _zstd.ZstdDecompressor().decompress(frame, max_output_size=max(size, 1))
    except _zstd.ZstdError as e:
        raise GpupoolError(f"chunk {cid[:12]}: zstd: {e}") from None
    if len(data) != size or chunk_id(data) != cid:
        raise GpupoolError(f"chunk {cid[:12]}: its bytes do not match its SHA-256 id")
    return data


def encode_records(frames: List[Tuple[str, bytes]]) -> bytes:
    """A chunk-record body: ``<id> <length>\\n<frame>`` back to back."""
    out = bytearray()
    for cid, frame in frames:
        out += f"{cid} {len(frame)}\n".encode("ascii")
        out += frame
    return bytes(out)


_RECORD_HEAD = re.compile(rb"([0-9a-f]{64}) (0|[1-9][0-9]{0,9})\n")


def decode_records(body: bytes) -> Iterator[Tuple[str, bytes]]:
    """The (id, frame) records of a chunk-record body, checked for framing
    only (open_chunk checks the frames)."""
    pos, index = 0, 0
    while pos < len(body):
        m = _RECORD_HEAD.match(body, pos)
        if not m:
            raise GpupoolError(f"records[{index}]: malformed record header")
        length = int(m.group(2))
        start = m.end()
        if start + length > len(body):
            raise GpupoolError(f"records[{index}]: length {length} runs past the end of the body")
        yield m.group(1).decode("ascii"), body[start:start + length]
        pos, index = start + length, index + 1


def iter_chunks(read: Callable[[int], bytes], size: int) -> Iterator[bytes]:
    """The chunks of a file read through `read(n)` (at most `size` bytes,
    what its listing said), with the same cut points as the CLI."""
    buf = b""
    left = size
    eof = False
    while True:
        if not eof and len(buf) < MAX_SIZE:
            want = min(left, 4 * MAX_SIZE)
            more = read(want) if want > 0 else b""
            left -= len(more)
            eof = not more
            buf += more
            continue
        if not buf:
            return
        n = next_chunk_length(buf)
        yield buf[:n]
        buf = buf[n:]


def optional_zstd_name() -> Optional[str]:
    """The zstandard version in use, or None."""
    return getattr(_zstd, "__version__", None) if _zstd is not None else None
