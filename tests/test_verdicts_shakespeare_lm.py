"""shakespeare-lm verdicts on synthetic results tables (the shape run_point writes) and the divergence path."""

from __future__ import annotations

import pandas as pd
import pytest

from lmsci.claims import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED
from lmsci.config import resolve_config
from lmsci.experiments.shakespeare_lm import ShakespeareLM
from lmsci.runs import RunDir


def table(gaps_bigram: list[float], val_nll: float = 1.47, cpt: float = 1.0) -> pd.DataFrame:
    """One row per training seed; ``gaps_bigram`` = bigram - model NLL in nats/token."""
    rows = []
    for k, g in enumerate(gaps_bigram):
        rows.append({
            "point": "char_L4_d128_learned" + (f"__s{k}" if k else ""), "tokenizer": "char", "vocab_size": 65,
            "val_nll": val_nll, "bigram_nll": val_nll + g, "unigram_nll": 3.3, "bigram_minus_model": g,
            "diff_ci_low": g - 0.02, "diff_ci_high": g + 0.02, "val_chars_per_token": cpt,
            "val_bits_per_char": val_nll / cpt / 0.6931, "n_val_windows": 1024, "val_works": "hamlet;macbeth",
            "unigram_alpha": 0.5, "bigram_alpha": 0.1, "seed_index": k, "status": "ok",
        })
    return pd.DataFrame(rows)


def outcomes(df: pd.DataFrame, tmp_path, preset: str = "quick") -> dict[str, str]:
    exp = ShakespeareLM()
    cfg = resolve_config(ShakespeareLM.Config, preset, {})
    vs = exp.verdicts(cfg, df, RunDir(tmp_path))
    assert [v.claim_id for v in vs] == [c.id for c in exp.claims]
    return {v.claim_id: v.outcome for v in vs}


def test_paper_numbers_reproduce(tmp_path):
    # nanoGPT baby GPT: 1.47 nats/char against a bigram at about 2.48
    assert outcomes(table([1.01, 0.98, 1.03]), tmp_path) == {"beats-bigram": REPRODUCED, "beats-unigram": REPRODUCED}


def test_bpe_gap_is_converted_to_nats_per_char(tmp_path):
    # 1.2 nats/token at 3 chars/token = 0.4 nats/char: below the registered 0.5
    assert outcomes(table([1.2, 1.21, 1.19], cpt=3.0), tmp_path)["beats-bigram"] == NOT_REPRODUCED


def test_clear_failure_is_not_reproduced(tmp_path):
    out = outcomes(table([0.10, 0.12, 0.08], val_nll=3.4), tmp_path)
    assert out["beats-bigram"] == NOT_REPRODUCED and out["beats-unigram"] == NOT_REPRODUCED


def test_one_seed_or_smoke_is_inconclusive(tmp_path):
    exp = ShakespeareLM()
    cfg = resolve_config(ShakespeareLM.Config, "quick", {})
    v = exp.verdicts(cfg, table([1.0]), RunDir(tmp_path))[0]
    assert v.outcome == INCONCLUSIVE and v.rule_passed and any("1 seed" in r for r in v.reasons)
    assert v.details["per_seed_within_run"][0]["within_run_bootstrap_95ci_over_windows_nats_per_char"] == \
        pytest.approx([0.98, 1.02])
    assert set(outcomes(table([1.01, 0.98, 1.03]), tmp_path, preset="smoke").values()) == {INCONCLUSIVE}


# the divergence path (smoke with lr=1e6) is tested in tests/test_corpus.py, which has the corpus fixture
