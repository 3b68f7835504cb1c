"""lmsci.laws: scaling-law forms, robust fitting with bootstrap CIs, model comparison, compute allocation.

- :mod:`lmsci.laws.forms`: Kaplan L(N), L(D), L(C), L(N, D), L(N, S); Chinchilla; BNSL with n breaks;
  the downstream-accuracy sigmoid (each a named form with named parameters).
- :mod:`lmsci.laws.fit`: Huber (delta 1e-3) on log loss, L-BFGS-B from a screened grid of starts,
  bootstrap CIs, held-out extrapolation error, AIC/BIC comparison (Besiroglu et al. 2024, arXiv 2404.10102).
- :mod:`lmsci.laws.allocation`: N_opt(C), D_opt(C), tokens per parameter under C = 6ND (Approach 3),
  IsoFLOP parabola minima (Approach 2), IsoLoss grids (Hoffmann et al. 2022, arXiv 2203.15556).
- :mod:`lmsci.laws.datasets`: CSV loading with errors naming the rows; the packaged Chinchilla data.
- :mod:`lmsci.laws.analysis`: one call from runs to fit, intervals, allocation and figures (``lmsci fit``).
"""

from lmsci.laws.allocation import allocation_table, approach2, chinchilla_allocation
from lmsci.laws.fit import FitResult, bootstrap, compare_forms, fit, heldout_error
from lmsci.laws.forms import FORMS, Form, get_form

__all__ = ["FORMS", "Form", "FitResult", "allocation_table", "approach2", "bootstrap", "chinchilla_allocation",
           "compare_forms", "fit", "get_form", "heldout_error"]
