"""``rlbisect compare``: the short-run judgement on runs you already have, no git involved.

Two groups of metrics files (one file per seed, JSONL or CSV, see :mod:`rlbisect.runlog`) are
scored per metric and judged by the same :class:`~rlbisect.bisect.stats.Rule` the short-run
predicate uses, at a single look: by default every metric both groups log, with the false-alarm
rate held at ``alpha`` over all of them; or one ``metric`` in one ``direction``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from rlbisect.bisect.stats import Decision, Direction, Rule
from rlbisect.errors import InputError
from rlbisect.runlog import dashboard, finite, read_rows, rename, scores

#: exit codes: nothing moved / a metric moved / the spread cannot tell
SAME, MOVED, UNSURE = 0, 1, 3


@dataclass
class Comparison:
    decision: Decision
    good: list[str]      # the files, in order
    runs: list[str]
    skipped: list[str]   # metrics left out (not finite in GOOD's runs)

    @property
    def exit_code(self) -> int:
        return {"good": SAME, "bad": MOVED, "unknown": UNSURE}[self.decision.verdict]

    def verdict_line(self) -> str:
        d, n = self.decision, len(self.decision.tests)
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
            sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
            return f"{statistics.fmean(xs):.4g} ± {sd:.2g}"
        width = max([len(t.metric) for t in self.decision.tests] + [6])
        lines = [f"{'metric':<{width}}  {'GOOD (n=%d)' % len(self.good):>18}  "
                 f"{'runs (n=%d)' % len(self.runs):>18}  {'moved':>9}  {'spreads':>7}  {'p':>8}"]
        for t in self.decision.tests:
            spreads = f"{t.spreads:.1f}" if math.isfinite(t.spreads) else "inf"
            mark = "  <- moved" if t in self.decision.deciding else ""
            lines.append(f"{t.metric:<{width}}  {ms(t.good):>18}  {ms(t.probe):>18}  {t.moved:>+9.3g}"
                         f"  {spreads:>7}  {t.p:>8.2g}{mark}")
        if self.skipped:
            lines.append(f"not compared (not finite in GOOD's runs): {', '.join(self.skipped)}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        d = self.decision
        return {"verdict": d.verdict, "exit_code": self.exit_code, "threshold": d.threshold,
                "good": self.good, "runs": self.runs, "skipped": self.skipped,
                "metrics": [{"metric": t.metric, "good": t.good, "runs": t.probe, "p": t.p,
                             "moved": t.moved, "direction": t.direction,
                             "spreads": t.spreads if math.isfinite(t.spreads) else None,
                             "moved_beyond_spread": t in d.deciding} for t in d.tests]}


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
            metric_map: dict[str, str] | None = None, alpha: float = 0.05) -> Comparison:
    """Judge ``runs`` against GOOD's seed spread (see the module docstring)."""
    if direction and not metric:
        raise InputError("--direction needs --metric: the dashboard counts a change either way")
    read = {f: rename(read_rows(f), metric_map or {}) for f in [*good, *runs]}
    empty = [f for f, rows in read.items() if not rows]
    if empty:
        raise InputError(f"{empty[0]}: no rows")
    g_runs = {i: read[f] for i, f in enumerate(good)}
    p_runs = {i: read[f] for i, f in enumerate(runs)}
    asked = [metric] if metric else metrics
    names = dashboard([*g_runs.values(), *p_runs.values()], asked)
    g, p = scores(g_runs, names, window), scores(p_runs, names, window)
    missing = [m for m in (asked or []) if m not in g or m not in p]
    if missing:
        raise InputError(f"metric {missing[0]!r} is not logged by every run "
                         f"(every run logs: {', '.join(dashboard(read.values())) or 'nothing'})")
    skipped = [m for m, v in g.items() if not finite(v)]
    g = {m: v for m, v in g.items() if m not in skipped}
    rule = Rule(alpha=alpha, k0=2, max_seeds=2)   # one look: every run is already there
    return Comparison(rule.judge(g, p, (direction or "lower") if metric else "change"),
                      list(good), list(runs), skipped)


def evidence_plot(comparison: Comparison, path: str | Path) -> Path:
    """GOOD's per-run scores against the other runs', for the metrics that moved (else the top 4)."""
    from rlbisect.plots import seed_spread
    d = comparison.decision
    shown = d.deciding[:6] or d.tests[:4]
    return seed_spread([("", t.metric, t.good, t.probe, t in d.deciding) for t in shown], path,
                       labels=("GOOD", "runs"))
