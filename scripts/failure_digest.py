#!/usr/bin/env python3
"""Prints, for each test that failed in the last ctest run of a build
directory, the few lines that say why: GoogleTest's failure lines and
pytest's short summary and assertion lines.

ctest --output-on-failure prints every failed test's whole output, and a
CI log that keeps only its head and tail loses the middle, where the reason
is. scripts/test.sh prints this digest last, so the tail always holds it.

    scripts/failure_digest.py BUILD_DIR
"""
import pathlib
import re
import sys

# Lines that carry the reason, in GoogleTest's and pytest's words. A
# GoogleTest failure line is followed by its indented details.
REASON = re.compile(
    r"(: Failure$|^\[  FAILED  \] .*\(\d+ ms\)$|^FAILED |^ERROR |^E   |Timeout|Segmentation fault"
    r"|Sanitizer|terminate called|Assertion .* failed|Traceback)")
DETAILS_AFTER = re.compile(r": Failure$")
PER_TEST = 10
# What the end-to-end tests' pool printed of its processes' logs on a
# failure (tests/integration/pool.py, log_digest).
POOL_LOG = "pool log| "
POOL_LOG_LINES = 30
WIDTH = 240


def reasons(lines):
    """The reason lines of one test's output, with a GoogleTest failure's
    detail lines (up to the next line that starts a new record)."""
    out, details = [], 0
    for line in lines:
        if details and line and not line.startswith(("[", "/")) and not REASON.search(line):
            out.append(line)
            details -= 1
            continue
        details = 0
        if REASON.search(line):
            out.append(line)
            if DETAILS_AFTER.search(line):
                details = 6
    return out


def sections(log):
    """(test name, output lines, failed) per test of a LastTest.log."""
    name, lines, in_output = None, [], False
    for line in log.splitlines():
        m = re.match(r"^\d+/\d+ Testing: (.+)$", line)
        if m:
            name, lines, in_output = m.group(1), [], False
            continue
        if line == "Output:":
            in_output = True
            continue
        if line == "<end of output>":
            in_output = False
            continue
        if name and in_output:
            lines.append(line)
        elif name and line.startswith(("Test Failed", "Test Passed")):
            yield name, lines, line.startswith("Test Failed")
            name = None


def main():
    build = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "build")
    log = build / "Testing" / "Temporary" / "LastTest.log"
    if not log.exists():
        print(f"failure digest: no {log}")
        return
    text = log.read_text(errors="replace")
    failed = [(n, l) for n, l, f in sections(text) if f]
    # A test that timed out or crashed ends without "Test Failed." in some
    # ctest versions: the list of failures is the one to trust.
    listed = build / "Testing" / "Temporary" / "LastTestsFailed.log"
    names = [l.split(":", 1)[1] for l in listed.read_text().split()] if listed.exists() else []
    seen = {n for n, _ in failed}
    print(f"== why the {len(names) or len(failed)} failed tests failed (from {log})")
    for name, lines in failed:
        found = reasons(lines)
        more = f" ({len(found) - PER_TEST} more in the log)" if len(found) > PER_TEST else ""
        print(f"-- {name}{more}")
        # Without a recognised reason, the end of its output.
        shown = found[:PER_TEST] or [l for l in lines if not l.startswith("-----")][-8:]
        pool_log = [l for l in lines if l.startswith(POOL_LOG)][-POOL_LOG_LINES:]
        for l in (shown or ["(no output: it timed out or died before writing any)"]) + pool_log:
            print("   " + (l if len(l) <= WIDTH else l[:WIDTH] + " ..."))
    for name in names:
        if name not in seen:
            print(f"-- {name}: no output recorded (timed out or crashed?)")


if __name__ == "__main__":
    main()
