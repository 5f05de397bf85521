"""What the checks found: one result per check, n/a with its reason, merged over probe seeds.

Pure data: the checks themselves are in :mod:`rlbisect.check.invariants` and
:mod:`rlbisect.check.run_level`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class CheckResult:
    name: str
    value: float                 # NaN when the check does not apply
    passed: bool                 # True when it does not apply: n/a is never a failure...
    seed: Optional[int] = None   # over several probe seeds: the one whose value this is
    na: str = ""                 # ...and never silent: why it does not apply to this trainer
    by_design: str = ""          # failed, on purpose: the adapter's explanation (passed is then True)
    setting: str = ""            # checked at several settings: the one whose value this is ("" = as configured)
    detail: str = ""             # what went wrong, in words, where a value alone does not say


@dataclass(frozen=True)
class NotApplicable:
    """What a check returns instead of (value, passed) when the trainer has nothing it could test."""

    reason: str


def over_seeds(runs: dict[int, dict[str, CheckResult]]) -> dict[str, CheckResult]:
    """One result per check from runs on several probe seeds: a check fails if it fails on any
    seed, and shows the first failing seed's value (else the first seed's)."""
    out = {}
    for name in next(iter(runs.values())):
        failing = [s for s, r in runs.items() if not r[name].passed]
        applies = [s for s, r in runs.items() if not r[name].na]
        seed = (failing or applies or list(runs))[0]
        r = runs[seed][name]
        out[name] = CheckResult(name, r.value, r.passed, seed, r.na, r.by_design, r.setting, r.detail)
    return out


def as_json(results: dict[str, CheckResult]) -> dict[str, dict]:
    """{check name: {"value": float, "passed": bool[, "seed": the probe seed shown]
    [, "setting": the setting shown, when not as configured][, "na": why it does not apply (value
    null)][, "by_design": why it fails on purpose]}}."""
    return {name: {"value": None if r.na else r.value, "passed": r.passed,
                   **({"seed": r.seed} if r.seed is not None else {}),
                   **({"setting": r.setting} if r.setting else {}), **({"na": r.na} if r.na else {}),
                   **({"by_design": r.by_design} if r.by_design else {}),
                   **({"detail": r.detail} if r.detail else {})}
            for name, r in results.items()}
