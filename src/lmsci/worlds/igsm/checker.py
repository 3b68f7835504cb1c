"""Full-solution checker for iGSM (the metric of Part 2.1 / 2.2, not the loss).

Source: Ye, Xu, Li, Allen-Zhu, arXiv 2407.20311, Section 3 ("we check the full solution, not only the
answer"); official ``tools/tools_test.true_correct``: final answer, every mod-23 calculation, every
dependency, missing (required but absent) and unneeded (present but not required) parameters.

:func:`check_solution` parses a generated solution sentence by sentence::

    Define <param name> as <sym>; [<t> = <hint> = <numbers> = <v>; ...] so <sym> = <hint> = <numbers> = <v>.
    Define <param name> as [BACK].          (a retracted wrong step of retry data: counted, skipped)

and verifies, per sentence:

* **calculation** (``n_calc_errors``): every number in ``<numbers>`` that stands for a symbol equals that
  symbol's stated value, and ``<v>`` equals the arithmetic mod 23 of ``<numbers>``;
* **dependency** (``n_dep_errors``): the parameter exists, is defined once, the parameters its
  expression uses are exactly its dependencies in the problem, each already defined in the
  solution, and every symbol is known;
* **definition** (``n_def_errors``, strict only): the stated value equals the problem's formula
  (operator, constant) applied to the stated values of its dependencies;
* **hint** (``n_hint_mismatches``, strict only): a constant in ``<hint>`` equals the number in its place
  in ``<numbers>`` (the official checker does not compare them).

``correct`` is the official-compatible verdict (``true_correct``): the final answer is right (the
``<ans>`` tail when there is one), the solution's last step defines the question parameter with that
same value (``final_ok``; the official checker reads both the tail and the last step), the text parsed,
and there are no calculation or dependency errors and no missing parameters (unneeded ones are
allowed and reported). ``strict_correct`` also needs no definition or hint errors.

Two differences from the official checker are deliberate (measured in ``tests/parity``): a
parameter defined twice is a dependency error here (the official parser accepts a second
definition under a fresh symbol), and a parameter that is not an edge of the structure graph is
unknown here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lmsci.worlds.igsm.config import ANS, BACK, SOL
from lmsci.worlds.igsm.problem import Problem, _apply, param_expr

_INT = re.compile(r"^-?\d+$")
_BIN = re.compile(r"^(\S+) ([+*-]) (\S+)$")


@dataclass
class SolutionCheck:
    """Verdict on one generated solution (see the module docstring for each count).

    ``answer``: the ``<ans>`` tail's number when the text has one, else the question parameter's stated
    value; ``final_value``: the value stated by the solution's last step; ``final_ok``: that last step
    defines the question parameter and its value is the problem's answer."""

    correct: bool
    strict_correct: bool
    answer_correct: bool
    answer: int | None
    final_ok: bool = False
    final_value: int | None = None
    n_steps: int = 0
    n_calc_errors: int = 0
    n_dep_errors: int = 0
    n_def_errors: int = 0
    n_hint_mismatches: int = 0
    n_parse_errors: int = 0
    n_retries: int = 0
    missing: list = field(default_factory=list)
    unneeded: list = field(default_factory=list)
    n_unneeded_ops: int = 0
    errors: list = field(default_factory=list)

    @property
    def n_missing(self) -> int:
        """Necessary parameters the solution never defined."""
        return len(self.missing)

    @property
    def n_unneeded(self) -> int:
        """Parameters the solution defined that the question does not need."""
        return len(self.unneeded)


def split_generated(text: str) -> tuple[str, str | None]:
    """(solution part, answer part or None) of a document or of a generated continuation: the text
    after the last ``<sol>`` (all of it if absent), cut at ``<ans>``; ``<eos>``/``<pad>`` removed."""
    if SOL in text:
        text = text.rsplit(SOL, 1)[1]
    ans = None
    if ANS in text:
        text, ans = text.split(ANS, 1)
        ans = ans.replace("<eos>", " ").replace("<pad>", " ").strip().split(" ")[0] if ans.strip() else ""
    return text.replace("<eos>", " ").replace("<pad>", " "), ans


def _tree_refs(e, out):
    if e[0] == "ref":
        out.append(e[1])
    elif e[0] == "bin":
        _tree_refs(e[2], out)
        _tree_refs(e[3], out)
    return out


def _eval_calculation(parts: list[str], pname: str, sym: str, chk: SolutionCheck, sym_val: dict, sym_param: dict,
                      mod: int) -> tuple | None:
    """Evaluate a sentence's calculation steps ``parts`` (``X = a + b = v; ...; so sym = ...``), counting
    calculation errors, hint mismatches, dependency and parse errors on ``chk``.

    Returns:
        ``(value, expression tree)`` of the final ``so`` step, or None when a step could not be read.
    """
    err = chk.errors.append
    local: dict = {}  # intermediate symbol -> (value, tree)
    final = None
    for n, step in enumerate(parts):
        is_final = n == len(parts) - 1
        if is_final:
            step = step[3:]
        pieces = [x.strip() for x in step.split(" = ")]
        lhs, rhs = pieces[0], pieces[1:]
        if (is_final and lhs != sym) or not rhs:
            chk.n_parse_errors += 1
            err(f"bad step {step!r}")
            return None
        try:
            val, tree, calc_ok, hint_ok = _eval_step(rhs, sym_val, sym_param, local, mod)
        except _DepError as e:
            chk.n_dep_errors += 1
            err(f"{pname}: {e}")
            return None
        except (ValueError, IndexError):
            chk.n_parse_errors += 1
            err(f"bad step {step!r}")
            return None
        if not calc_ok:
            chk.n_calc_errors += 1
            err(f"{pname}: calculation {step!r}")
        if not hint_ok:
            chk.n_hint_mismatches += 1
        if is_final:
            final = (val, tree)
        else:
            local[lhs] = (val, tree)
    return final


def _check_definition(problem: Problem, p, pname: str, val: int, tree, defined: dict, chk: SolutionCheck) -> None:
    """Count a dependency error when the expression ``tree`` does not use exactly ``p``'s dependencies, else a
    definition error when the problem's formula on the stated values ``defined`` does not give ``val``."""
    used = _tree_refs(tree, [])
    true_expr = param_expr(problem, p)
    want = _tree_refs(true_expr, [])
    if sorted(used) != sorted(want):
        chk.n_dep_errors += 1
        chk.errors.append(f"{pname}: uses {sorted(used)} instead of {sorted(want)}")
    else:
        # definition: the problem's formula on the stated values of the dependencies
        vals = {u: defined[u] for u in used}
        if _eval_tree(true_expr, vals, problem.mod) != val:
            chk.n_def_errors += 1
            chk.errors.append(f"{pname}: value {val} does not follow the problem's definition")


def _read_sentence(s: str, problem: Problem, chk: SolutionCheck, defined: dict, sym_val: dict,
                   sym_param: dict) -> tuple | None:
    """Check one solution sentence ``Define <param> as <sym>; ...; so <sym> = ...`` and record the parameter's
    stated value in ``defined``, ``sym_val`` and ``sym_param``.

    Returns:
        ``(parameter, stated value)`` when the sentence defined a parameter, else None (a retry ``[BACK]``,
        or a sentence not read).
    """
    err = chk.errors.append
    chk.n_steps += 1
    parts = [x.strip() for x in s.split(";")]
    m = re.match(r"^Define (.+) as (\S+)$", parts[0])
    if not m:
        chk.n_parse_errors += 1
        err(f"unparsed sentence {s[:80]!r}")
        return None
    pname, sym = m.group(1), m.group(2)
    if sym == BACK:
        chk.n_retries += 1
        return None
    p = problem.name_to_param.get(pname)
    if p is None:
        chk.n_dep_errors += 1
        err(f"unknown parameter {pname!r}")
        return None
    if p in defined:
        chk.n_dep_errors += 1
        err(f"{pname!r} defined twice")
    if len(parts) < 2 or not parts[-1].startswith("so "):
        chk.n_parse_errors += 1
        err(f"no 'so' step in {s[:80]!r}")
        return None
    final = _eval_calculation(parts[1:], pname, sym, chk, sym_val, sym_param, problem.mod)
    if final is None:
        return None
    val, tree = final
    # dependencies: the parameters used are exactly p's dependencies, each defined before
    _check_definition(problem, p, pname, val, tree, defined, chk)
    defined[p] = val
    sym_val[sym] = val
    sym_param[sym] = p
    return p, val


def _judge(problem: Problem, chk: SolutionCheck, defined: dict, last: tuple | None, ans_txt: str | None) -> None:
    """Fill ``chk``'s answer, final step, missing and unneeded parameters, and the ``correct`` flags."""
    mod = problem.mod
    if ans_txt is not None and _INT.match(ans_txt or ""):
        chk.answer = int(ans_txt)
    elif problem.question_param in defined:
        chk.answer = defined[problem.question_param]
    chk.answer_correct = chk.answer is not None and chk.answer == problem.answer
    if last is not None:
        chk.final_value = last[1]
        chk.final_ok = last[0] == problem.question_param and last[1] % mod == problem.answer
        if not chk.final_ok:
            chk.errors.append(f"last step defines {problem.param_name(last[0])!r} = {last[1]}, not the question "
                              f"{problem.param_name(problem.question_param)!r} = {problem.answer}")
    necessary = set(problem.necessary)
    chk.missing = [p for p in problem.necessary if p not in defined]
    chk.unneeded = [p for p in defined if p not in necessary]
    from lmsci.worlds.igsm.problem import _cost

    chk.n_unneeded_ops = sum(_cost(problem, p) for p in chk.unneeded)
    chk.correct = (chk.answer_correct and chk.final_ok and chk.n_parse_errors == 0 and chk.n_calc_errors == 0
                   and chk.n_dep_errors == 0 and not chk.missing)
    chk.strict_correct = chk.correct and chk.n_def_errors == 0 and chk.n_hint_mismatches == 0


def check_solution(problem: Problem, text: str) -> SolutionCheck:
    """Check a generated solution of ``problem``.

    Args:
        problem: the :class:`~lmsci.worlds.igsm.problem.Problem` asked.
        text: the full document, the prompt plus the generated continuation, or the continuation
            alone (everything after the last ``<sol>``; an ``<ans> n`` tail is read as the answer,
            otherwise the question parameter's stated value is; either way ``correct`` also needs the
            last step to define the question parameter with the right value, as the official
            ``true_correct``).

    Returns:
        :class:`SolutionCheck`. Never raises on malformed text (counted as parse errors).
    """
    sol, ans_txt = split_generated(text)
    sym_val: dict = {}       # symbol -> stated value
    sym_param: dict = {}     # symbol -> parameter
    defined: dict = {}       # parameter -> stated value
    last = None              # (parameter, stated value) of the last step that defined one
    chk = SolutionCheck(correct=False, strict_correct=False, answer_correct=False, answer=None)
    for s in (s.strip() for s in sol.split(".")):
        if not s:
            continue
        got = _read_sentence(s, problem, chk, defined, sym_val, sym_param)
        if got is not None:
            last = got
    _judge(problem, chk, defined, last, ans_txt)
    return chk


class _DepError(Exception):
    pass


def _operand(tok: str, sym_val, sym_param, local, mod):
    """(value, tree) of a hint operand: a constant, a parameter symbol or an intermediate symbol."""
    if _INT.match(tok):
        return int(tok) % mod, ("num", int(tok) % mod)
    if tok in local:
        return local[tok]
    if tok in sym_val:
        return sym_val[tok], ("ref", sym_param[tok])
    raise _DepError(f"symbol {tok!r} used before it is defined")


def _eval_step(rhs: list, sym_val, sym_param, local, mod):
    """rhs of ``lhs = hint [= numbers] = value`` -> (value, tree, calc_ok, hint_ok)."""
    if len(rhs) == 1:  # "so a = 5": a constant
        v = int(rhs[0])
        return v, ("num", v % mod), True, True
    hint, value = rhs[0], int(rhs[-1])
    m = _BIN.match(hint)
    if not m:  # "so a = b = 6": a copy
        if len(rhs) != 2:
            raise ValueError(hint)
        v, tree = _operand(hint, sym_val, sym_param, local, mod)
        return value, tree, v == value, True
    a, op, b = m.groups()
    va, ta = _operand(a, sym_val, sym_param, local, mod)
    vb, tb = _operand(b, sym_val, sym_param, local, mod)
    if len(rhs) != 3:
        raise ValueError(hint)
    mc = _BIN.match(rhs[1])
    if not mc or mc.group(2) != op:
        raise ValueError(rhs[1])
    ca, cb = int(mc.group(1)), int(mc.group(3))
    hint_ok = (ta[0] != "num" or ca == va) and (tb[0] != "num" or cb == vb)
    calc_ok = ((ta[0] == "num" or ca == va) and (tb[0] == "num" or cb == vb)
               and _apply(op, ca, cb) == value % mod and 0 <= value < mod)
    return value, ("bin", op, ta, tb), calc_ok, hint_ok


def _eval_tree(e, vals, mod):
    if e[0] == "num":
        return e[1] % mod
    if e[0] == "ref":
        return vals[e[1]]
    return _apply(e[1], _eval_tree(e[2], vals, mod), _eval_tree(e[3], vals, mod))
