"""Shared fixtures of the measure tests."""

import pytest


@pytest.fixture
def one_thread():
    """Run a test on one torch thread (tiny models: threads only add contention on 2 cores)."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
