"""iGSM: the synthetic grade-school-math world of Physics of LMs Part 2.1 / 2.2 (arXiv 2407.20311,
2408.16293).

Modules: :mod:`~lmsci.worlds.igsm.config` (config, named worlds, markers), :mod:`~lmsci.worlds.igsm.world`
(the generator), :mod:`~lmsci.worlds.igsm.structure` (one attempt's steps), :mod:`~lmsci.worlds.igsm.draws` (its
random draws), :mod:`~lmsci.worlds.igsm.problem` (problems, text, retry data, rendering),
:mod:`~lmsci.worlds.igsm.checker` (full-solution checker), :mod:`~lmsci.worlds.igsm.labels` (V-probing labels), :mod:`~lmsci.worlds.igsm.tokenizer` (word-level / BPE tokenizer, packed training
windows), :mod:`~lmsci.worlds.igsm.variants` (re-instantiation, no-op and repeated sentences),
:mod:`~lmsci.worlds.igsm.names` (category chains and item names), :mod:`~lmsci.worlds.igsm.brute` (the brute-force
solution: every defined parameter).

Typical use::

    world = IGSMWorld("igsm-med")                    # or IGSMWorld(IGSMConfig(...))
    p = world.sample(seed, op=None, split="train")   # op drawn per problem ("light")
    text, mistake_mask = p.text(retry_rate=0.2, rng=seed)
    tok = IGSMTokenizer()                            # word level; kind="bpe" for byte-level BPE
    ids = [tok.bos_id] + tok.encode(p.prompt())      # the model continues after <sol>
    check_solution(p, generated_text).correct        # the official true_correct
"""

from lmsci.worlds.igsm.config import (  # noqa: F401
    ANS, BACK, IGSM_WORLDS, PROB, RAND, SOL, TEST_HASHES, TRAIN_HASHES, IGSMConfig, get_world_config,
)
from lmsci.worlds.igsm.problem import Definition, Problem  # noqa: F401,E402
from lmsci.worlds.igsm.world import IGSMWorld  # noqa: F401,E402
from lmsci.worlds.igsm.checker import SolutionCheck, check_solution  # noqa: F401,E402
from lmsci.worlds.igsm.labels import TASKS, ProbeItem, probe_inputs, probe_labels, probe_query_text  # noqa: F401,E402
from lmsci.worlds.igsm.tokenizer import IGSMTokenizer, get_batch_fn, packed_windows  # noqa: F401,E402
from lmsci.worlds.igsm.variants import add_noop, add_repeats, reinstantiate  # noqa: F401,E402
