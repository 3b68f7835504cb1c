"""The ``lmsci`` command line: a thin typer app. Parse, look up the registry, call; no science here.

The commands live by concept: :mod:`lmsci.cli.catalog` looks up what the lab holds (``list``, ``claims``,
``models``, ``check-model``); :mod:`lmsci.cli.run` runs experiments, reads their run directories and holds the
standalone tools (``run``, ``suite``, ``show``, ``report``, ``train``, ``generate``, ``fit``, ``profile``);
:mod:`lmsci.cli.common` holds what they share. They are registered here, in the order ``lmsci --help`` lists them.
"""

from __future__ import annotations

import typer

from lmsci.cli import catalog, run

app = typer.Typer(
    help="lmsci: a laboratory for the science of language models. "
    "`lmsci list` shows the experiments; `lmsci run NAME` reproduces one end to end.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# the order of `lmsci --help`
app.command("list")(catalog.list_cmd)
app.command("claims")(catalog.claims_cmd)
app.command("run")(run.run_cmd)
app.command("suite")(run.suite_cmd)
app.command("show")(run.show_cmd)
app.command("report")(run.report_cmd)
app.command("train")(run.train_cmd)
app.command("generate")(run.generate_cmd)
app.command("fit")(run.fit_cmd)
app.command("models")(catalog.models_cmd)
app.command("check-model")(catalog.check_model_cmd)
app.command("profile")(run.profile_cmd)


def main() -> None:  # console script entry point
    app()
