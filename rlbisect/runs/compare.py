"""``rlbisect compare``: the short-run judgement on runs you already have, no git involved.

Two groups of metrics files (one file per seed, JSONL or CSV, see :mod:`rlbisect.runs.read`) are
scored per metric and judged by the same :class:`~rlbisect.runs.stats.Rule` the short-run
predicate uses, at a single look: by default every metric both groups log, with the false-alarm
rate held at ``alpha`` over all of them; or one ``metric`` in one ``direction``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from rlbisect.errors import ExitCode, InputError
from rlbisect.runs.judge import Question, dashboard, fingerprint, judge
from rlbisect.runs.read import read_rows, rename
from rlbisect.runs.stats import Decision, Direction, Rule, mean_sd


@dataclass
class Comparison:
    decision: Decision | None    # None when a metric went non-finite: that decides by itself
    good: list[str]              # the files, in order
    runs: list[str]
    skipped: list[str]           # metrics left out (not finite in GOOD's runs)
    nonfinite: dict[str, tuple[list[float], list[float], str]] = field(default_factory=dict)
    #: ^ metric -> (GOOD's scores, the runs', how): finite at GOOD, not in the runs (a regression)
    bookkeeping: dict[str, str] = field(default_factory=dict)   # metric -> why it was not judged

    @property
    def verdict(self) -> str:
        return "bad" if self.nonfinite or self.decision is None else self.decision.verdict

    @property
    def exit_code(self) -> int:
        return {"good": ExitCode.OK, "bad": ExitCode.FINDING, "unknown": ExitCode.NO_ANSWER}[self.verdict]

    def verdict_line(self) -> str:
        d = self.decision
        if self.nonfinite:
            moved = f"; moved beyond GOOD's seed spread too: {', '.join(t.metric for t in d.deciding)}" \
                if d is not None and d.verdict == "bad" else ""
            return "not a finite number in the runs while finite at GOOD: " + "; ".join(
                f"{m} ({how})" for m, (_, _, how) in self.nonfinite.items()) + moved
        assert d is not None
        n = len(d.tests)
        if d.verdict == "bad":
            names = ", ".join(t.metric for t in d.deciding)
            return f"moved beyond GOOD's seed spread: {names} (p < {d.threshold:.2g} over {n} metrics)"
        if d.verdict == "good":
            return f"nothing moved beyond GOOD's seed spread ({n} metric{'s' * (n != 1)} compared)"
        return (f"unsure: the smallest p ({d.p:.2g}) is neither below {d.threshold:.2g} nor clearly "
                "large; add runs on each side")

    def table(self) -> str:
        """Every metric, most-moved first: means, spreads, the move and its p."""
        def ms(xs: list[float]) -> str:
            mean, sd = mean_sd(xs)
            return f"{mean:.4g} ± {sd:.2g}"
        tests = self.decision.tests if self.decision else []
        width = max([len(t.metric) for t in tests] + [len(m) for m in self.nonfinite] + [6])
        lines = [f"{'metric':<{width}}  {'GOOD (n=%d)' % len(self.good):>18}  "
                 f"{'runs (n=%d)' % len(self.runs):>18}  {'moved':>9}  {'spreads':>7}  {'p':>8}"]
        for m, (good, runs, _) in self.nonfinite.items():
            lines.append(f"{m:<{width}}  {ms(good):>18}  {ms(runs):>18}  {'':>9}  {'':>7}  {'':>8}"
                         "  <- not finite")
        for t in tests:
            spreads = f"{t.spreads:.1f}" if math.isfinite(t.spreads) else "inf"
            mark = "  <- moved" if self.decision and t in self.decision.deciding else ""
            lines.append(f"{t.metric:<{width}}  {ms(t.good):>18}  {ms(t.probe):>18}  {t.moved:>+9.3g}"
                         f"  {spreads:>7}  {t.p:>8.2g}{mark}")
        if self.skipped:
            lines.append(f"not compared (not finite in GOOD's runs): {', '.join(self.skipped)}")
        if self.bookkeeping:
            lines.append("not compared (bookkeeping, name it with --metric to judge it): "
                         + "; ".join(f"{m}: {why}" for m, why in self.bookkeeping.items()))
        return "\n".join(lines)

    def to_json(self) -> dict:
        d = self.decision
        tests = d.tests if d else []
        return {"verdict": self.verdict, "exit_code": self.exit_code,
                "threshold": d.threshold if d else None,
                "good": self.good, "runs": self.runs, "skipped": self.skipped,
                "nonfinite": [{"metric": m, "good": g, "runs": [x if math.isfinite(x) else str(x) for x in r],
                               "how": how} for m, (g, r, how) in self.nonfinite.items()],
                "bookkeeping": self.bookkeeping,
                "metrics": [{"metric": t.metric, "good": t.good, "runs": t.probe, "p": t.p,
                             "moved": t.moved, "direction": t.direction,
                             "spreads": t.spreads if math.isfinite(t.spreads) else None,
                             "moved_beyond_spread": d is not None and t in d.deciding} for t in tests]}


def split_runs(args: list[str]) -> tuple[list[str], list[str]]:
    """``GOOD... --vs RUNS...`` -> (GOOD's files, the other files)."""
    if args.count("--vs") != 1:
        raise InputError("give GOOD's runs, then --vs and the runs to judge: "
                         "rlbisect compare good_s0.jsonl good_s1.jsonl --vs new_s0.jsonl new_s1.jsonl")
    i = args.index("--vs")
    good, runs = args[:i], args[i + 1:]
    for side, files in (("GOOD", good), ("--vs", runs)):
        if len(files) < 2:
            raise InputError(f"{side}: at least 2 runs (seeds) are needed to know the seed spread, "
                             f"got {len(files)}")
        unknown = [f for f in files if f.startswith("-")]
        if unknown:
            raise InputError(f"unknown option {unknown[0]} (options go before the run files)")
    return good, runs


def compare(good: list[str], runs: list[str], *, metric: str | None = None,
            metrics: list[str] | None = None, direction: Direction | None = None, window: int = 4,
            metric_map: dict[str, str] | None = None, alpha: float = 0.05, paired: bool = False) -> Comparison:
    """Judge ``runs`` against GOOD's seed spread (see the module docstring). ``paired``: the n-th
    file of each side ran the same seed, so each metric is also read seed by seed, as the short-run
    predicate reads its matched seeds."""
    if direction and not metric:
        raise InputError("--direction needs --metric: the dashboard counts a change either way")
    if paired and len(good) != len(runs):
        raise InputError(f"--paired: {len(good)} GOOD runs and {len(runs)} others; give the same seeds, "
                         "in the same order, on both sides")
    read = {f: rename(read_rows(f), metric_map or {}) for f in [*good, *runs]}
    empty = [f for f, rows in read.items() if not rows]
    if empty:
        raise InputError(f"{empty[0]}: no rows")
    if len({fingerprint(read[f]) for f in good}) == 1 and fingerprint(read[good[0]]):
        # as the short-run predicate: any change at all would be "infinite spreads"
        raise InputError(f"GOOD's {len(good)} runs logged the same numbers (bookkeeping aside): there is no "
                         "seed spread to judge against (were they trained on different seeds?)")
    rule = Rule(alpha=alpha, k0=2, max_seeds=2, paired=paired)   # one look: every run is already there
    j = judge({i: read[f] for i, f in enumerate(good)}, {i: read[f] for i, f in enumerate(runs)}, rule,
              Question(metric, metrics, direction, window))
    if j.absent:
        hint = "" if metric or metrics else ("; every GOOD run logs it: renamed (--metric-map THEIRS=OURS) or "
                                             "no longer logged (--metrics to choose what to judge)?")
        raise InputError(f"metric {j.absent[0][0]!r} is not logged by every run "
                         f"(every run logs: {', '.join(dashboard(read.values())) or 'nothing'}){hint}")
    if j.nothing_in_common:
        raise InputError("no metric is logged (finite) by both groups of runs: nothing to compare "
                         f"(GOOD's: {', '.join(j.good) or 'none'}; the others': {', '.join(j.other) or 'none'})")
    return Comparison(j.decision, list(good), list(runs), j.left_out,
                      {m: (j.good[m], j.other[m], how) for m, how in j.went_nonfinite.items()}, j.bookkeeping)


def evidence_plot(comparison: Comparison, path: str | Path) -> Path:
    """GOOD's per-run scores against the other runs', for the metrics that moved (else the top 4)."""
    from rlbisect.plots import seed_spread
    d = comparison.decision
    shown = [("", m, g, [x if math.isfinite(x) else math.nan for x in r], True)
             for m, (g, r, _) in comparison.nonfinite.items()]
    if d is not None:
        shown += [("", t.metric, t.good, t.probe, t in d.deciding) for t in d.deciding[:6] or d.tests[:4]]
    return seed_spread(shown, path, labels=("GOOD", "runs"))
