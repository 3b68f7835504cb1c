"""``python -m lmsci.cli ...``: the ``lmsci`` command (what ``lmsci suite --jobs`` starts for each experiment)."""

import sys

from lmsci.cli import main

sys.exit(main())
