"""lmsci.worlds: controlled worlds whose ground truth is known, and real corpora. A world never imports a model,
a trainer or an instrument: it makes token ids (and the truth to score them against).

- grammars and languages: :func:`get_grammar` / :class:`CFG` (layered random CFGs, Allen-Zhu & Li, arXiv
  2305.13673), :class:`Dyck`, :class:`PosPCFG`;
- in-context structure: :class:`RepeatedSegments` (induction heads, Olsson et al., arXiv 2209.11895),
  :class:`LinearRegressionWorld` (Garg et al., arXiv 2208.01066), :class:`HMMMixture` (GINC, Xie et al., arXiv
  2111.02080);
- knowledge: :class:`FactualRecallWorld` (Nichani et al., arXiv 2412.06538), :class:`BiosWorld` (bioS, Allen-Zhu
  & Li, arXiv 2309.14316), :class:`FactoidWorld`;
- reasoning and arithmetic: :func:`modular_data` (Power et al., arXiv 2201.02177), :class:`IGSMWorld` (iGSM, Ye
  et al., arXiv 2407.20311), :class:`AlpineWorld` (arXiv 2405.09220), :class:`KGWorld` (arXiv 2402.03268),
  :class:`IOIWorld` (arXiv 2211.00593);
- text: :func:`load_works` (the Shakespeare corpus), :class:`CharTokenizer`, :class:`BPETokenizer`,
  :func:`train_tokenizer`.

Names are imported lazily on first use (:mod:`lmsci._api`).
"""

from lmsci._api import lazy_exports

_EXPORTS = {
    "get_grammar": "lmsci.worlds.cfg_grammars",
    "CFG": "lmsci.worlds.cfg",
    "Dyck": "lmsci.worlds.dyck",
    "PosPCFG": "lmsci.worlds.pos_pcfg",
    "RepeatedSegments": "lmsci.worlds.repeated_segments",
    "LinearRegressionWorld": "lmsci.worlds.linear_regression",
    "HMMMixture": "lmsci.worlds.hmm_mixture",
    "FactualRecallWorld": "lmsci.worlds.factual_recall",
    "BiosWorld": "lmsci.worlds.bios",
    "FactoidWorld": "lmsci.worlds.factoids",
    "modular_data": "lmsci.worlds.modular",
    "IGSMWorld": "lmsci.worlds.igsm.world",
    "AlpineWorld": "lmsci.worlds.alpine",
    "KGWorld": "lmsci.worlds.kg_walks",
    "IOIWorld": "lmsci.worlds.ioi",
    "load_works": "lmsci.worlds.shakespeare",
    "CharTokenizer": "lmsci.worlds.tokenizers",
    "BPETokenizer": "lmsci.worlds.tokenizers",
    "train_tokenizer": "lmsci.worlds.tokenizers",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
