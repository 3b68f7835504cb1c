"""lmsci.laws: scaling-law forms, robust fitting with bootstrap CIs, model comparison, compute allocation.

- :mod:`lmsci.laws.forms`: Kaplan L(N), L(D), L(C), L(N, D), L(N, S); Chinchilla; BNSL with n breaks;
  the downstream-accuracy sigmoid (each a named form with named parameters).
- :mod:`lmsci.laws.fit`: Huber (delta 1e-3) on log loss, L-BFGS-B from a screened grid of starts, the certificate
  of the optimum, bootstrap CIs, AIC/BIC (Besiroglu et al. 2024, arXiv 2404.10102).
- :mod:`lmsci.laws.objective`: the objective (Huber loss, the problem over the free parameters), the certificate's
  tolerances, the grid of starts, its batched screening and the L-BFGS-B polish.
- :mod:`lmsci.laws.compare`: held-out extrapolation error and model comparison (RMSE, AIC, BIC, held-out RMSE).
- :mod:`lmsci.laws.allocation`: N_opt(C), D_opt(C), tokens per parameter under C = 6ND (Approach 3),
  IsoFLOP parabola minima (Approach 2), IsoLoss grids (Hoffmann et al. 2022, arXiv 2203.15556).
- :mod:`lmsci.laws.datasets`: CSV loading with errors naming the rows; the packaged Chinchilla data.
- :mod:`lmsci.laws.analysis`: one call from runs to fit, intervals, allocation and figures (``lmsci fit``).

Names are imported lazily on first use (:mod:`lmsci._api`), but for :func:`fit`, which shares its module's name.
"""

from lmsci._api import lazy_exports

_EXPORTS = {
    "FORMS": "lmsci.laws.forms",
    "Form": "lmsci.laws.forms",
    "get_form": "lmsci.laws.forms",
    "fit": "lmsci.laws.fit",
    "FitResult": "lmsci.laws.fit",
    "bootstrap": "lmsci.laws.fit",
    "compare_forms": "lmsci.laws.compare",
    "heldout_error": "lmsci.laws.compare",
    "allocation_table": "lmsci.laws.allocation",
    "approach2": "lmsci.laws.allocation",
    "chinchilla_allocation": "lmsci.laws.allocation",
    "load_csv": "lmsci.laws.datasets",
    "analyze": "lmsci.laws.analysis",
}
__all__ = list(_EXPORTS)
# a public name that is also a submodule's: bound eagerly (see lmsci._api)
from lmsci.laws.fit import fit  # noqa: E402

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
