import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # helpers.py and models.py


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _own_plan_cache(tmp_path, monkeypatch):
    # Each test plans afresh: a plan cached by an earlier test (or an earlier run) would
    # be replayed without planning, and tests inspect what planning does.
    monkeypatch.setenv("OFFLOAD_COMPILER_CACHE_DIR", str(tmp_path / "offload_cache"))


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    # Each test compiles afresh: a cache hit would skip the partitioner, and the tests
    # inspect the plans it records.
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True):
        yield
    torch._dynamo.reset()
