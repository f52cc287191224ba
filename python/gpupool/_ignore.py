""".gpupoolignore: which files of a work directory are left out of an
upload, with the CLI's rules (src/blob/ignore.h), those of .gitignore::

    # a comment; blank lines are ignored
    *.pt            any file or directory named so, at any depth
    data/           a directory named "data" at any depth (not a file so named)
    /build          only "build" at the top of the work directory
    logs/*.txt      a pattern with a slash inside is anchored at the top
    **/cache        "cache" at any depth; a/**/b: zero or more directories between
    out/**          everything inside "out"
    !keep.pt        re-includes what an earlier pattern left out
    \\#file, \\!file  a literal leading '#' or '!'; "\\ " keeps a trailing space

``*`` and ``?`` never match '/', ``[a-z]``/``[!a]`` are character classes
(fnmatch), and the last pattern that matches a path decides. A file cannot
be re-included when a directory above it is left out. Only DIR/.gpupoolignore
is read, and nothing is left out implicitly (not even .git/).

Pure; an IgnoreRules is immutable once built.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import List, Pattern, Tuple

__all__ = ["IgnoreRules", "IGNORE_FILE"]

IGNORE_FILE = ".gpupoolignore"


def _glob_regex(glob: str) -> Pattern[str]:
    """fnmatch(3) with no flags, as a regular expression: backslash escapes,
    ``*``, ``?`` and bracket classes (``[!...]`` and ``[^...]`` negate)."""
    out, i, n = [], 0, len(glob)
    while i < n:
        c = glob[i]
        if c == "\\" and i + 1 < n:
            out.append(re.escape(glob[i + 1]))
            i += 2
        elif c == "*":
            out.append(".*")
            i += 1
        elif c == "?":
            out.append(".")
            i += 1
        elif c == "[":
            j = i + 1
            negate = j < n and glob[j] in "!^"
            if negate:
                j += 1
            items: List[str] = []
            first = True
            while j < n and (glob[j] != "]" or first):
                ch = glob[j]
                if ch == "\\" and j + 1 < n:
                    ch = glob[j + 1]
                    j += 1
                if j + 2 < n and glob[j + 1] == "-" and glob[j + 2] != "]":
                    hi = glob[j + 2]
                    items.append(re.escape(ch) + "-" + re.escape(hi))
                    j += 3
                else:
                    items.append(re.escape(ch))
                    j += 1
                first = False
            if j >= n:  # no closing bracket: a literal '['
                out.append(re.escape("["))
                i += 1
            else:
                out.append("[" + ("^" if negate else "") + "".join(items) + "]")
                i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out), re.DOTALL)


@dataclass(frozen=True)
class _Pattern:
    segments: Tuple[str, ...]
    regexes: Tuple[Pattern[str], ...]
    negate: bool
    dir_only: bool
    anchored: bool


def _trim_trailing_spaces(line: str) -> str:
    while line.endswith(" "):
        if len(line) >= 2 and line[-2] == "\\":
            break
        line = line[:-1]
    return line


class IgnoreRules:
    """The rules of one .gpupoolignore text."""

    def __init__(self, text: str = ""):
        patterns = []
        for raw in text.split("\n"):
            line = raw[:-1] if raw.endswith("\r") else raw
            line = _trim_trailing_spaces(line)
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            if negate:
                line = line[1:]
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            anchored = "/" in line  # a slash at the start or in the middle
            segments = tuple(s for s in line.split("/") if s)
            if not segments:
                continue
            regexes = tuple(_glob_regex(s) for s in segments)
            patterns.append(_Pattern(segments, regexes, negate, dir_only, anchored))
        self._patterns = tuple(patterns)

    @classmethod
    def for_dir(cls, directory: str) -> "IgnoreRules":
        """The rules of DIR/.gpupoolignore; none when it does not exist."""
        try:
            with open(os.path.join(directory, IGNORE_FILE), "rb") as f:
                return cls(f.read().decode("utf-8", "surrogateescape"))
        except FileNotFoundError:
            return cls()

    def __bool__(self) -> bool:
        return bool(self._patterns)

    @staticmethod
    def _match_from(p: _Pattern, i: int, path: List[str], j: int) -> bool:
        if i == len(p.segments):
            return j == len(path)
        if p.segments[i] == "**":
            if i + 1 == len(p.segments):
                return j < len(path)
            return any(IgnoreRules._match_from(p, i + 1, path, k) for k in range(j, len(path) + 1))
        return (j < len(path) and p.regexes[i].fullmatch(path[j]) is not None
                and IgnoreRules._match_from(p, i + 1, path, j + 1))

    @staticmethod
    def _matches(p: _Pattern, path: List[str]) -> bool:
        if not path:
            return False
        if not p.anchored:
            return p.regexes[0].fullmatch(path[-1]) is not None
        return IgnoreRules._match_from(p, 0, path, 0)

    def ignored(self, path: str, is_dir: bool) -> bool:
        """Whether `path` (relative, '/'-separated) is left out."""
        if not self._patterns:
            return False
        segments = [s for s in path.split("/") if s]
        for depth in range(1, len(segments) + 1):
            prefix = segments[:depth]
            prefix_is_dir = depth < len(segments) or is_dir
            ignored = False
            for p in self._patterns:
                if p.dir_only and not prefix_is_dir:
                    continue
                if self._matches(p, prefix):
                    ignored = not p.negate
            if ignored:
                return True
        return False
