"""iGSM: the synthetic grade-school-math world of Physics of LMs Part 2.1 / 2.2 (arXiv 2407.20311,
2408.16293). See :mod:`lmsci.worlds.igsm.world` (generator), :mod:`~lmsci.worlds.igsm.checker`
(full-solution checker), :mod:`~lmsci.worlds.igsm.tokenizer` (word-level / BPE tokenizer, packed
training windows) and :mod:`~lmsci.worlds.igsm.labels` (V-probing labels)."""

from lmsci.worlds.igsm.world import (  # noqa: F401
    ANS, BACK, IGSM_WORLDS, PROB, RAND, SOL, TEST_HASHES, TRAIN_HASHES, Definition, IGSMConfig, IGSMWorld, Problem,
    get_world_config,
)
