"""Value-side path patching step of ``ioi-circuit``: the duplicate-token / induction heads that feed the S-inhibition
heads' values.

Source: Wang, Variengien, Conmy, Shlegeris, Steinhardt, arXiv 2211.00593, sec. 3.3 ("which heads affect the
S-inhibition heads' values?": path patching from p_ABC into the S-inhibition heads' values finds the duplicate-token
heads 0.1, 3.0 and the induction heads 5.5, 6.9, which attend from S2 to S1 and to S1+1); the keys are patched the
same way (App. B; there previous-token heads are found through the induction heads' keys).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from lmsci.measure import patching as P

Head = tuple[int, int]


def sinh_heads(d_s: torch.Tensor, threshold: float) -> list[Head]:
    """S-inhibition heads: the senders whose query path patching raised the name movers' END->S attention by at
    least ``threshold`` (``d_s``: ``[n_layers, n_heads]``, NaN for heads not below the name movers)."""
    m = torch.nan_to_num(d_s, nan=-float("inf")) >= threshold
    return [(int(l), int(h)) for l, h in torch.nonzero(m).tolist()]


def dup_by_values(model, disc, test, receivers: Sequence[Head], min_frac: float) -> dict[str, Any]:
    """Find the head that carries the most logit difference into the S-inhibition heads' values and read its S2
    attention (Wang et al. sec. 3.3).

    On the discovery prompts ``disc`` (an :class:`~lmsci.worlds.ioi.IOIBatch` with its ABC twin), every head below
    the ``receivers`` (the S-inhibition heads) is path-patched into their values
    (:func:`lmsci.measure.patching.path_patching_scan`, ``receiver_input='v'``; also ``'k'``, reported); the sender
    with the most negative change of the logit difference is the found head when that change is at most
    ``-min_frac x (LD_clean - LD_ABC)`` (discovery means, nats; a gap <= 0 finds nothing). On the test prompts
    ``test``, its attention at S2 to S1 (duplicate token) and to S1+1 (induction); the larger one is the statistic
    (0 when nothing is found or no head lies below the receivers). The null: a random head of the same count (one)
    of the same layers, i.e. the mean of that attention over the eligible heads (0 when there are none).

    Returns:
        row fields: ``val_max``, ``random_val`` (probabilities in [0, 1]), ``val_head`` (JSON ``[l, h]`` or
        ``null``), ``val_eff`` (its value-side change, nats), ``val_gap`` (discovery LD_clean - LD_ABC, nats),
        ``val_kind`` ('duplicate-token' / 'induction' / 'none'), ``val`` and ``val_k`` (JSON ``[n_layers][n_heads]``
        value- and key-side changes, NaN -> 0 where not computed), ``sinh_set`` (JSON list of the receivers).
    """
    row = {"val_max": 0.0, "random_val": 0.0, "val_head": json.dumps(None), "val_eff": float("nan"),
           "val_gap": float("nan"), "val_kind": "none", "val": json.dumps(None), "val_k": json.dumps(None),
           "sinh_set": json.dumps([list(r) for r in receivers])}
    low = min((l for l, _ in receivers), default=0)
    if low == 0:
        return row
    args = (model, disc.clean, disc.corrupt, disc.end, disc.io, disc.s, list(receivers))
    eff, eff_k = P.path_patching_scan(*args, "v"), P.path_patching_scan(*args, "k")
    gap = float((P.logit_diff(model, disc.clean, disc.end, disc.io, disc.s)
                 - P.logit_diff(model, disc.corrupt, disc.end, disc.io, disc.s)).mean())
    dup = P.attention_between(model, test.clean, test.s2_pos, [test.s1_pos])[:low]
    ind = P.attention_between(model, test.clean, test.s2_pos, [test.s1_pos + 1])[:low]
    di = torch.maximum(dup, ind)
    l, h = divmod(int(torch.argmin(eff[:low].flatten())), model.cfg.n_heads)
    found = gap > 0 and float(eff[l, h]) <= -min_frac * gap
    row.update(random_val=float(di.mean()), val_head=json.dumps([l, h]), val_eff=float(eff[l, h]), val_gap=gap,
               val=json.dumps(np.nan_to_num(eff.numpy()).tolist()),
               val_k=json.dumps(np.nan_to_num(eff_k.numpy()).tolist()))
    if found:
        row.update(val_max=float(di[l, h]),
                   val_kind="duplicate-token" if float(dup[l, h]) >= float(ind[l, h]) else "induction")
    return row
