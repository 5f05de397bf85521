"""After a find: what moved between the first bad commit and its parent, biggest movers first.

Pure: takes the two commits' measured values (the invariant values, for the invariants predicate)
and ranks them; the runner does the probing.
"""

from __future__ import annotations

import math
from typing import Any


# Below this, values differ by float round-off (an fp32 identity that holds leaves ~1e-8); without a
# floor 3.8e-9 -> 0 would count as a full move and rank above the check that actually failed.
NOISE = 1e-6


def _score(a: float, b: float) -> tuple[float, float]:
    """(relative change in [0, 1], absolute change); NaN on either side counts as a full move."""
    if any(isinstance(v, float) and math.isnan(v) for v in (a, b)):
        return 1.0, math.inf
    diff = abs(b - a)
    return (diff / max(abs(a) + abs(b), NOISE) if diff else 0.0), diff


def _number(value: object) -> float | None:
    """A measured value, or None where there is none (a check n/a at that commit)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def compare(parent: dict, first_bad: dict) -> list[dict]:
    """Rows {name, parent, first_bad, change} for every value either side measured, biggest movers
    first; a value one side lacks (n/a) is None, and a check that became n/a (or stopped being n/a)
    counts as a full move."""
    rows: list[dict[str, Any]] = []
    for name in [*first_bad, *(k for k in parent if k not in first_bad)]:
        a, b = _number(parent.get(name)), _number(first_bad.get(name))
        if a is None or b is None:
            if a is not None or b is not None:
                rows.append({"name": name, "parent": a, "first_bad": b, "change": None, "relative": 1.0,
                             "_abs": math.inf})
            continue
        rel, diff = _score(a, b)
        rows.append({"name": name, "parent": a, "first_bad": b, "change": b - a, "relative": rel, "_abs": diff})
    rows.sort(key=lambda r: (-r["relative"], -r["_abs"]))
    for r in rows:
        del r["_abs"]
    return rows


def render(diagnosis: dict, limit: int = 12, terms: tuple[str, str] = ("good", "bad")) -> str:
    """The side-by-side table for the terminal and the markdown report, biggest movers first;
    ``terms``: a fix search's (old, new) words for git's good and bad."""
    word = {"good": terms[0], "bad": terms[1]}
    new = terms[1]
    if not diagnosis or not diagnosis.get("rows"):
        return ""
    w = max(34, *(len(r["name"]) for r in diagnosis["rows"][:limit]))   # long check names stay aligned
    verdicts = (word.get(str(diagnosis[k]), str(diagnosis[k])) for k in ("parent_verdict", "first_bad_verdict"))
    lines = [f"diagnose: {diagnosis['parent'][:10]} (parent, {next(verdicts)}) -> "
             f"{diagnosis['first_bad'][:10]} (first {new}, {next(verdicts)})",
             f"  {'value':<{w}} {'parent':>11} {'first ' + new:>11} {'change':>11}"]

    def cell(x: float | None, fmt: str) -> str:
        return f"{'n/a':>11}" if x is None else format(x, fmt)
    for r in diagnosis["rows"][:limit]:
        lines.append(f"  {r['name']:<{w}} {cell(r['parent'], '11.4g')} {cell(r['first_bad'], '11.4g')} "
                     f"{cell(r['change'], '+11.3g')}")
    if len(diagnosis["rows"]) > limit:
        lines.append(f"  ... {len(diagnosis['rows']) - limit} more in the JSON (diagnosis)")
    return "\n".join(lines)
