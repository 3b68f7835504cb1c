import os

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """The tests' models are tiny: one intra-op thread is faster than two (on a shared, oversubscribed
    2-core machine two spinning OpenMP threads were several times slower). Restored after each test.
    ``LMSCI_TEST_THREADS=2`` runs them on two threads instead: a test must pass either way (issue 46: results
    that hold on every machine), so the switch checks that no test depends on the thread count."""
    n = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("LMSCI_TEST_THREADS", "1")))
    yield
    torch.set_num_threads(n)
