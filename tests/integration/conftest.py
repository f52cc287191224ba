import pytest

from pool import Pool


@pytest.fixture
def pool(tmp_path):
    p = Pool(tmp_path)
    yield p
    p.stop()
