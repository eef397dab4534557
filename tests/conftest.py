import os
import tempfile

import psutil
import pytest
import torch


@pytest.fixture
def no_leftover_children():
    """Assert that the test leaves no child process of this process alive, but the zygote that
    warm launches keep for this process (`gnnorch.launch.zygote`; its children are checked)
    and torch's shared-memory daemon."""
    yield
    from gnnorch.launch import zygote

    kept = zygote.current_pid()
    # torch's shared-memory daemon, started once a payload of many tensors was shared by
    # name (`compat.processes.storages_shared_by_name`), lives as long as this process
    children = [p for p in psutil.Process().children(recursive=True)
                if p.pid != kept and p.name() != "torch_shm_manager"]
    gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, f"processes left behind: {[(p.pid, p.name()) for p in alive]}"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (none visible)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


os.environ.setdefault("GNNORCH_DATA_DIR", os.path.join(os.path.dirname(__file__), "..", ".data"))
# measured rewrite decisions are kept on disk between runs: tests start from an empty cache
os.environ.setdefault("GNNORCH_CACHE_DIR", tempfile.mkdtemp(prefix="gnnorch-test-cache-"))


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module of many small ops (on a shared 2-core box more
    threads only add synchronisation); modules opt in with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
