import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # helpers.py and models.py


#: The GPU's hardware profile as JSON, calibrated once per test run (see pytest_configure).
PROFILE_ENV = "OFFLOAD_COMPILER_TEST_PROFILE"


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")
    # With a GPU, its hardware profile is calibrated once, here, before any test runs
    # and before pytest-xdist starts its workers (they inherit it through the
    # environment): each test has a cache folder of its own (below), so every worker
    # process calibrated afresh beside the others' tests on the same GPU, and a profile
    # measured under that contention changed what "auto" planned (session 15: nothing
    # offloaded in a test that needs offloads).
    if torch.cuda.is_available() and not hasattr(config, "workerinput") and PROFILE_ENV not in os.environ:
        from offload_compiler.planning import hardware

        before = os.environ.get("OFFLOAD_COMPILER_CACHE_DIR")
        with tempfile.TemporaryDirectory(prefix="offload-test-profile-") as folder:
            os.environ["OFFLOAD_COMPILER_CACHE_DIR"] = folder
            try:
                os.environ[PROFILE_ENV] = json.dumps(dataclasses.asdict(hardware.profile_for("cuda")))
            finally:
                if before is None:
                    os.environ.pop("OFFLOAD_COMPILER_CACHE_DIR")
                else:
                    os.environ["OFFLOAD_COMPILER_CACHE_DIR"] = before


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
    # The run's calibrated GPU profile (pytest_configure); a test that clears the
    # profiles (hardware._memo) calibrates into its own folder.
    seeded = os.environ.get(PROFILE_ENV)
    if seeded:
        from offload_compiler.planning import hardware

        profile = hardware.HardwareProfile(**json.loads(seeded))
        monkeypatch.setitem(hardware._memo, torch.cuda.get_device_name(), profile)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    # Each test compiles afresh: a cache hit would skip the partitioner, and the tests
    # inspect the plans it records.
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True):
        yield
    torch._dynamo.reset()
