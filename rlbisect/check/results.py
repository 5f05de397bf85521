"""What the checks found: one result per check, n/a with its reason, merged over probe seeds.

Pure data: the checks themselves are in :mod:`rlbisect.check.invariants` and
:mod:`rlbisect.check.run_level`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from rlbisect.errors import ExitCode


@dataclass
class CheckResult:
    name: str
    value: float                 # NaN when the check does not apply
    passed: Optional[bool]       # None when it does not apply: n/a is neither a pass nor a failure...
    seed: Optional[int] = None   # over several probe seeds: the one whose value this is
    na: str = ""                 # ...and never silent: why it does not apply to this trainer
    by_design: str = ""          # failed, on purpose: the adapter's explanation (passed is then True)
    setting: str = ""            # checked at several settings: the one whose value this is ("" = as configured)
    detail: str = ""             # what went wrong, in words, where a value alone does not say

    def __post_init__(self) -> None:
        if self.na:      # every producer of an n/a says so here, whatever it passed as `passed`
            self.passed = None

    @property
    def failed(self) -> bool:
        return self.passed is False

    def excused(self, by_design: dict[str, str]) -> "CheckResult":
        """This result, or where it failed and the adapter declares that failure on purpose
        (``by_design``: check name -> why), shown with that explanation instead of as FAIL."""
        if not self.failed or self.name not in by_design:
            return self
        return CheckResult(self.name, self.value, True, self.seed, by_design=by_design[self.name],
                           setting=self.setting, detail=self.detail)


@dataclass(frozen=True)
class NotApplicable:
    """What a check returns instead of (value, passed) when the trainer has nothing it could test."""

    reason: str


def over_seeds(runs: dict[int, dict[str, CheckResult]]) -> dict[str, CheckResult]:
    """One result per check from runs on several probe seeds: a check fails if it fails on any
    seed, and shows the first failing seed's value (else the first seed's)."""
    out = {}
    for name in next(iter(runs.values())):
        failing = [s for s, r in runs.items() if r[name].failed]
        applies = [s for s, r in runs.items() if not r[name].na]
        seed = (failing or applies or list(runs))[0]
        r = runs[seed][name]
        out[name] = CheckResult(name, r.value, r.passed, seed, r.na, r.by_design, r.setting, r.detail)
    return out


def as_json(results: dict[str, CheckResult]) -> dict[str, dict]:
    """{check name: {"value": float, "passed": bool (null when n/a)[, "seed": the probe seed shown]
    [, "setting": the setting shown, when not as configured][, "na": why it does not apply (value
    null)][, "by_design": why it fails on purpose]}}."""
    return {name: {"value": None if r.na else r.value, "passed": r.passed,
                   **({"seed": r.seed} if r.seed is not None else {}),
                   **({"setting": r.setting} if r.setting else {}), **({"na": r.na} if r.na else {}),
                   **({"by_design": r.by_design} if r.by_design else {}),
                   **({"detail": r.detail} if r.detail else {})}
            for name, r in results.items()}


def tally(passed: Iterable[Optional[bool]]) -> tuple[int, int, int]:
    """(passed, failed, could not run) of the checks' ``passed`` values (True, False, None)."""
    values = list(passed)
    return values.count(True), values.count(False), values.count(None)


def exit_code(passed: Iterable[Optional[bool]]) -> int:
    """What ``rlbisect check`` exits with for these ``passed`` values: 1 when one failed, 125
    (:attr:`~rlbisect.errors.ExitCode.CANNOT_RUN`) when none could run, else 0. A check that
    could not run never makes the answer a pass on its own."""
    ok, failed, _ = tally(passed)
    return ExitCode.FINDING if failed else ExitCode.OK if ok else ExitCode.CANNOT_RUN
