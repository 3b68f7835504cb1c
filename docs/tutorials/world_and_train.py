"""Build a controlled world, train a GPT on it with lmsci's trainer, and measure what it learned.

    python docs/tutorials/world_and_train.py [STEPS]        # default 400 steps (~20 s on one core)

The world: sequences of random tokens in which a segment is repeated (`lmsci.worlds.RepeatedSegments`, the setting
of Olsson et al. 2022, arXiv 2209.11895). Its ground truth is known: the first copy of the segment is unpredictable
(log n_tokens nats per token), the second is predictable only by looking back in context. The model: a 2-layer
attention-only GPT. The measurement: the loss on each copy, and each head's prefix-matching score (the attention
an induction head pays to the token after the previous occurrence of the current token).
"""

from __future__ import annotations

import math
import sys

import numpy as np
import torch

from lmsci.measure import attention_patterns, prefix_matching_scores, token_nll
from lmsci.models import GPT, GPTConfig
from lmsci.train import TrainConfig, train
from lmsci.worlds import RepeatedSegments

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 400
torch.set_num_threads(1)

world = RepeatedSegments(n_tokens=32, seq_len=48, seg_min=6, seg_max=16)
model = GPT(GPTConfig(vocab_size=world.vocab_size, seq_len=world.seq_len, n_layers=2, n_heads=4, d_model=64,
                      mlp="none", pos="rope"))                      # attention only, rotary positions
print(f"world: {world}; model: {model.num_params():,} parameters")


def get_batch(step: int, gen: torch.Generator):
    """The trainer's data contract: (input_ids [batch, seq], targets [batch, seq]) drawn from ``gen`` only."""
    rng = np.random.default_rng(int(torch.randint(2**31, (1,), generator=gen)))
    x, _ = world.sample(32, rng)
    x = torch.from_numpy(x)
    return x[:, :-1], x[:, 1:]


res = train(model, get_batch, TrainConfig(steps=steps, batch_size=32, lr=1e-2, warmup_steps=50, device="cpu",
                                          log_every=100), seed=0)
print(f"trained {res.steps} steps, {res.tokens_seen:,} tokens; final training loss {res.final['loss']:.3f} nats")

# evaluation on fresh samples with a fixed segment length, as Olsson et al. measure
x, m = world.sample(64, np.random.default_rng(123), seg_len=12)
x = torch.from_numpy(x)
early, late = (torch.from_numpy(mask[:, 1:]) for mask in world.copy_masks(m))   # masks over predicted tokens
nll = token_nll(model.eval(), x[:, :-1], x[:, 1:])                               # [batch, seq - 1] nats
print(f"loss on the first copy  {nll[early].mean():.3f} nats (chance: log {world.n_tokens} = "
      f"{math.log(world.n_tokens):.3f})")
print(f"loss on the second copy {nll[late].mean():.3f} nats (in-context loss {nll[late].mean() - nll[early].mean():+.3f})")

scores = prefix_matching_scores(attention_patterns(model, x), torch.from_numpy(world.induction_targets(m)))
for layer, row in enumerate(scores.tolist()):                                   # [n_layers, n_heads]
    print(f"prefix-matching scores, layer {layer}: " + " ".join(f"{s:.2f}" for s in row))
