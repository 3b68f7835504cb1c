"""report.markdown_table: the default table (unchanged) and the ``cols=`` / ``float_format=`` form the knowledge
experiments' reports use (formerly their own ``md_table``)."""

from __future__ import annotations

import math

import pandas as pd

from lmsci.report import markdown_table

DF = pd.DataFrame({"point": ["a", "b"], "n": [3, 25000], "x": [0.12345, math.nan], "ok": [True, False]})


def test_default_table_keeps_four_significant_digits_nan_and_the_empty_marker():
    assert markdown_table(DF) == ("| point | n | x | ok |\n|---|---|---|---|\n| a | 3 | 0.1235 | True |\n"
                                  "| b | 25000 | nan | False |\n")
    assert markdown_table(DF[:0]) == "_(no rows)_\n"
    assert markdown_table(DF, max_rows=1).endswith("\n_1 more rows in results.csv_\n")


def test_cols_and_float_format_keep_column_types_and_blank_non_finite_cells():
    out = markdown_table(DF, None, cols=["x", "n", "point"], float_format=".3f")
    assert out == "| x | n | point |\n|---|---|---|\n| 0.123 | 3 | a |\n|  | 25000 | b |\n"
    # every row with max_rows=None; an empty table is its header alone
    assert markdown_table(pd.concat([DF] * 40), None, cols=["n"], float_format=".3f").count("\n") == 82
    assert markdown_table(DF[:0], None, cols=["n"], float_format=".3f") == "| n |\n|---|\n"
