import os

import pytest

from pool import Pool, check_sanitizer_reports


@pytest.fixture(autouse=True)
def sanitizer_reports(tmp_path_factory, monkeypatch):
    """Every process a test starts (servers, agents, shims, the CLI, `gpupool
    dev` and what it starts) writes any sanitizer report to a file of its own
    here, whatever becomes of its output; a report fails the test. In a build
    without sanitizers the options are ignored and nothing is written."""
    reports = tmp_path_factory.mktemp("sanitizer")
    os.chmod(reports, 0o1777)  # processes that run as another account write here too
    for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
        options = os.environ.get(var, "")
        monkeypatch.setenv(var, f"{options}{':' if options else ''}log_path={reports}/report")
    yield
    check_sanitizer_reports(reports, "report.*")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keeps each phase's report on the test item, so that a fixture's
    teardown knows whether the test failed."""
    report = (yield).get_result()
    setattr(item, f"report_{report.when}", report)


@pytest.fixture
def pool(tmp_path, request):
    p = Pool(tmp_path)
    yield p
    call = getattr(request.node, "report_call", None)
    if call is not None and call.failed:
        # What the pool's processes said, for a failure seen only in a CI log.
        print(p.log_digest())
    p.stop()
