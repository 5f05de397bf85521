"""The measured search against the per-commit methods and the binary searches, side by side.

Simulated part (default): 64-commit histories whose runs are independent draws (seeds never
matched), the culprit uniform in 1..64. Rows: the metric lower by 0.5, 1, 2 and 4 seed spreads
with normal seeds; 1 and 2 spreads with heavy-tailed seeds (Student t, 3 degrees of freedom, unit
standard deviation); the spread doubled with the mean unchanged; the spread doubled and the mean
0.8 spreads lower (TinyAgent's ``accum_local``: a model that assumes one spread for both sides
names wrong commits there). Every tool sees the same
histories and the same draw for the n-th run at a commit:

* ``measured``: ``--flaky`` on the numbers (:mod:`rlbisect.bisect.measured`), and its rounds with
  ``--jobs 4``;
* ``short-run``: the per-commit rule (:class:`~rlbisect.runs.stats.Rule`: Welch against GOOD's
  seeds, 3 then 5, 7, 9; unknown at 9 is a skip) driving git's bisection; GOOD's runs are shared.
  Welch's test alone, as the rule was when the docs' figures were measured: the predicate has since
  also read matched seeds seed by seed (``Rule(paired=True)``), which on these unmatched draws only
  gives a fifth of Welch's threshold to a test that sees nothing more;
* ``pinpoint``: a fixed number of repeats per commit (``--repeats``, default 20), Mann-Whitney
  against GOOD's runs at alpha 0.01, no skip;
* ``flaky`` and ``bayesect``: today's binary ``--flaky`` and git-bayesect 1.2 on the runs made
  binary at the midpoint of the two true means (for the spread row: ``|x| > 1``), a threshold
  neither would know: what they cost at best.

Real part (``--real N``): ``rlbisect run`` itself on N toy-trainer repositories per shift (32
commits, every commit reseeding the stream: ``history_fixtures/noisy_trainer.py``), ``--flaky
--predicate short-run --metric reward --direction lower`` against the same command without
``--flaky``.

``--step S``: the metric has levels S seed spreads apart (a pass rate over a few tasks).

``--min-effect X``: the measured search with a smallest move worth naming of X seed spreads, on a
flat metric (nothing changed) and the rows, beside the same search without one.

The deterministic-trainer rows (seeds that repeat) are in ``bench_measured_matched.py``.

Usage: python benchmarks/bench_measured.py [--histories 200] [--repeats 20] [--rows ...] [--real 20]
       [--min-effect 0.5] [--step 0.5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from rlbisect.bisect.bayes import FlakySearch   # noqa: E402
from rlbisect.bisect.measured import MeasuredSearch   # noqa: E402
from rlbisect.bisect.search import BisectState, linear_history   # noqa: E402
from rlbisect.errors import Verdict   # noqa: E402
from rlbisect.runs.stats import Rule   # noqa: E402

ROWS = {"normal 0.5": ("normal", 0.5), "normal 1": ("normal", 1.0), "normal 2": ("normal", 2.0),
        "normal 4": ("normal", 4.0), "heavy 1": ("heavy", 1.0), "heavy 2": ("heavy", 2.0),
        "spread x2": ("spread", 0.0),
        "spread x2 lower 0.8": ("both", 0.8)}
N, BUDGET, STEP, SEED = 64, 600, 0.0, 7


class History:
    """One history: the culprit and a fixed draw for the j-th run at each commit."""

    def __init__(self, kind: str, shift: float, seed: int):
        rng = np.random.default_rng(seed)
        self.kind, self.shift = kind, shift
        self.culprit = int(rng.integers(1, N + 1))
        self.seed = seed
        self.draws: dict[tuple[int, int], float] = {}

    def run(self, pos: int, j: int) -> float:
        if (pos, j) not in self.draws:
            rng = np.random.default_rng([self.seed, pos, j])
            x = rng.standard_t(3) / np.sqrt(3) if self.kind == "heavy" else rng.normal()
            bad = pos >= self.culprit
            x = 2 * x - self.shift if self.kind in ("spread", "both") and bad else x - (self.shift if bad else 0)
            self.draws[pos, j] = float(np.round(x / STEP) * STEP) if STEP else x   # a metric with levels
        return self.draws[pos, j]

    def failed(self, pos: int, j: int) -> bool:
        x = self.run(pos, j)
        return abs(x) > 1 if self.kind == "spread" else x < -self.shift / 2


def measured(h: History, jobs: int = 1, min_effect: float | None = None) -> tuple[int | None, int, int, str]:
    s = MeasuredSearch(N, "change" if h.kind == "spread" else "lower", min_effect=min_effect)
    seen: dict[int, int] = {}
    runs = rounds = 0
    while (d := s.decide(0.95, BUDGET, runs)).status == "probe":
        picks = [d.probe] if jobs == 1 else s.propose(min(jobs, BUDGET - runs), d.probe)
        rounds += 1
        for p in picks:
            s.observe(p, h.run(p, seen.get(p, 0)))
            seen[p] = seen.get(p, 0) + 1
            runs += 1
    return (d.first_bad if d.status == "found" else None), runs, rounds, d.status


def per_commit(h: History, judge, cost: int) -> tuple[int | None, int]:
    """git's bisection on per-commit verdicts; ``judge(pos) -> (verdict, runs)``; BAD is judged
    too when no probe came out bad (the answer would rest on it)."""
    names = [str(i) for i in range(N + 1)]
    state = BisectState(linear_history(names), {"0"}, names[-1])
    runs, said_bad = cost, False
    while not state.done:
        c = state.next_probes(1)[0]
        v, used = judge(int(c))
        runs += used
        said_bad |= v == "bad"
        state.mark(c, Verdict.SKIP if v == "unknown" else Verdict(v))
    if not said_bad:
        v, used = judge(N)
        runs += used
        if v != "bad":
            return None, runs
    return (int(state.first_bad) if state.first_bad else None), runs


def short_run(h: History, rule: Rule = Rule(), forced: float | None = None) -> tuple[int | None, int]:
    """Today's rule, or another; ``forced``: at the cap, bad below this p and good above (no skip)."""
    direction, good_used = ("change" if h.kind == "spread" else "lower"), [0]

    def judge(pos: int):
        for k in rule.schedule():
            good_used[0] = max(good_used[0], k)
            v, p = rule.decide([h.run(0, j) for j in range(k)], [h.run(pos, j) for j in range(k)], direction)
            if v != "unknown":
                return v, k
        return ("unknown" if forced is None else "bad" if p < forced else "good"), k
    culprit, runs = per_commit(h, judge, 0)
    return culprit, runs + good_used[0]


def mannwhitney_p(a: list[float], b: list[float]) -> float:
    """One-sided p that ``b`` tends to lie above ``a`` (normal approximation, ties counted half)."""
    from statistics import NormalDist
    x, y = np.asarray(a)[None, :], np.asarray(b)[:, None]
    u = float((y > x).sum() + 0.5 * (y == x).sum())
    n, m = len(a), len(b)
    z = (u - n * m / 2) / np.sqrt(n * m * (n + m + 1) / 12)
    return 1 - NormalDist().cdf(z)


def pinpoint(h: History, repeats: int, alpha: float = 0.01) -> tuple[int | None, int]:
    good = [h.run(0, j) for j in range(repeats)]

    def judge(pos: int):
        probe = [h.run(pos, j) for j in range(repeats)]
        if h.kind == "spread":   # a change in spread: compare distances from GOOD's median
            med = float(np.median(good))
            p = mannwhitney_p([abs(x - med) for x in good], [abs(x - med) for x in probe])
        else:   # lower at the probe: GOOD's runs lie above the probe's
            p = mannwhitney_p(probe, good)
        return ("bad" if p < alpha else "good"), repeats
    return per_commit(h, judge, repeats)


def binary(h: History, which: str) -> tuple[int | None, int]:
    seen: dict[int, int] = {}

    def oracle(pos: int) -> bool:
        j = seen.get(pos, 0)
        seen[pos] = j + 1
        return h.failed(pos, j)
    if which == "bayesect":
        import bayesect_peer
        out = bayesect_peer.simulate(N, oracle, 0.95, BUDGET)
        return out.culprit, out.runs
    s, runs = FlakySearch(N), 0
    while (d := s.decide(0.95, BUDGET, runs)).status == "probe":
        s.observe(d.probe, Verdict.BAD if oracle(d.probe) else Verdict.GOOD)
        runs += 1
    return (d.first_bad if d.status == "found" else None), runs


def tally(outcomes: list[tuple[int | None, int]], truth: list[int]) -> str:
    right = sum(c == t for (c, _), t in zip(outcomes, truth))
    wrong = sum(c is not None and c != t for (c, _), t in zip(outcomes, truth))
    runs = np.array([r for _, r in outcomes])
    n = len(truth)
    return (f"{100 * right / n:5.1f}% right, {wrong:3d} wrong, {n - right - wrong:3d} none; "
            f"runs {runs.mean():6.1f} (p95 {np.percentile(runs, 95):4.0f})")


def simulated(histories: int, repeats: int, rows: list[str], others: bool = True) -> None:
    from bayesect_peer import available
    peer = available() is None
    for row in rows:
        kind, shift = ROWS[row]
        t0 = time.perf_counter()
        hs = [History(kind, shift, 1000 * i + SEED) for i in range(histories)]
        truth = [h.culprit for h in hs]
        m = [measured(h) for h in hs]
        print(f"== {row} ({histories} histories of {N} commits)")
        print(f"  measured          {tally([(c, r) for c, r, *_ in m], truth)}")
        m4 = [measured(h, 4) for h in hs]
        ratio = np.mean([x[2] for x in m4]) / np.mean([x[1] for x in m])
        print(f"  measured --jobs 4 {tally([(c, r) for c, r, *_ in m4], truth)}; rounds "
              f"{np.mean([x[2] for x in m4]):.1f} = {ratio:.2f}x its sequential runs")
        if not others:
            continue
        print(f"  short-run         {tally([short_run(h) for h in hs], truth)}")
        print(f"  pinpoint x{repeats:<7d}{tally([pinpoint(h, repeats) for h in hs], truth)}")
        print(f"  flaky (binary)    {tally([binary(h, 'flaky') for h in hs], truth)}")
        if peer:
            print(f"  bayesect (binary) {tally([binary(h, 'bayesect') for h in hs], truth)}")
        print(f"  ({time.perf_counter() - t0:.0f}s)", flush=True)
    if not peer:
        print(f"git-bayesect rows left out: {available()}")


def smallest_move(histories: int, delta: float, rows: list[str]) -> None:
    """``--min-effect``: the measured search with a smallest move worth naming, on a flat metric
    (right = "nothing changed") and on the rows (right = the culprit), beside it without one."""
    for row in ["flat", *(r for r in rows if ROWS[r][0] != "spread")]:
        kind, shift = ("normal", 0.0) if row == "flat" else ROWS[row]
        hs = [History(kind, shift, 1000 * i + SEED) for i in range(histories)]
        for label, me in ((f"--min-effect {delta:g}", delta), ("without", None)):
            got = [measured(h, 1, me) for h in hs]
            runs = np.array([g[1] for g in got])
            if row == "flat":       # right: "nothing changed"; none: not sure (the budget spent)
                right = sum(g[3] == "no_regression" for g in got)
                wrong = sum(g[0] is not None for g in got)
            else:
                right = sum(g[0] == h.culprit for g, h in zip(got, hs))
                wrong = sum(g[0] is not None and g[0] != h.culprit for g, h in zip(got, hs))
            budget, nothing = int((runs >= BUDGET).sum()), sum(g[3] == "no_regression" for g in got)
            said = "" if row == "flat" else f", {nothing} of them 'nothing changed'"
            print(f"  {row:11s} {label:17s} {100 * right / histories:5.1f}% right, {wrong:3d} wrong, "
                  f"{histories - right - wrong:3d} none ({budget} at the budget{said}); runs {runs.mean():6.1f} "
                  f"(p95 {np.percentile(runs, 95):4.0f})", flush=True)


def training_runs(res: dict) -> int:
    """What a search trained, from its JSON. Measured: a run per probe, plus the per-commit runs made
    before a switch to it. Per commit: each probe's seeds, GOOD's (the most any probe used), and
    what judging the culprit against its parent trained."""
    probes = res["probes"]
    if res["strategy"] == "measured":
        return sum(p["role"] != "per-commit" for p in probes) + (res.get("switched") or {}).get("per_commit_runs", 0)
    return sum(int(p["values"].get("seeds", 1)) for p in probes if p["role"] != "confirm") + max(
        [int(p["values"].get("seeds", 0)) for p in probes] + [0]) + sum(
        int(p["evidence"].get("trained", 0)) for p in probes if p["role"] == "confirm")


def real(count: int, shifts: list[float], tools: tuple[str, ...] = ("measured", "short-run")) -> None:
    from history_fixtures.noisy_trainer import build
    cmd = ["--predicate", "short-run", "--metric", "reward", "--direction", "lower", "--no-cache",
           "--", sys.executable, "train.py", "--seed", "{seed}", "--out", "{out}"]
    for shift in shifts:
        out: dict[str, list] = {t: [] for t in tools}
        for i in range(count):
            with tempfile.TemporaryDirectory() as tmp:
                rng = np.random.default_rng([int(shift * 100), i] + ([] if SEED == 7 else [SEED]))
                culprit = int(rng.integers(1, 33))
                shas = build(Path(tmp) / "repo", 32, culprit, shift, salt=i + (0 if SEED == 7 else 1000 * SEED))
                for name in tools:
                    extra = {"measured": ["--flaky"], "per-commit": ["--per-commit"]}.get(name, [])
                    report = Path(tmp) / f"{name}.json"
                    done = subprocess.run([sys.executable, "-m", "rlbisect", "run", f"{shas[0]}..{shas[-1]}", *extra,
                                    "--json", str(report), *cmd], cwd=Path(tmp) / "repo", capture_output=True,
                                   text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
                    if not report.exists():   # the run itself failed: no answer, and say so
                        print(f"  rlbisect run failed on history {i}: {done.stderr.strip()[-300:]}")
                        out[name].append((None, 0, culprit))
                        continue
                    res = json.loads(report.read_text())
                    named = res.get("first_bad")
                    runs = training_runs(res)
                    out[name].append((shas.index(named) if named in shas else None, runs, culprit))
        for name, rows in out.items():
            print(f"  real, shift {shift:g}, {name:9s} {tally([(c, r) for c, r, _ in rows], [t for *_, t in rows])}",
                  flush=True)


def main() -> None:
    global BUDGET, STEP, SEED
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--histories", type=int, default=200)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of: {', '.join(ROWS)}")
    p.add_argument("--real", type=int, default=0, help="also this many real histories per shift")
    p.add_argument("--shifts", default="1,2,4", help="--real: the shifts in seed spreads")
    p.add_argument("--min-effect", type=float, default=None, help="only the smallest-move rows, at this size")
    p.add_argument("--budget", type=int, default=BUDGET, help="runs at most per search")
    p.add_argument("--measured-only", action="store_true", help="leave out the other tools")
    p.add_argument("--tools", default="measured,short-run", help="--real: of measured (--flaky), short-run "
                   "(the default: per commit, switching to measured when seeds do not match), per-commit (--per-commit)")
    p.add_argument("--step", type=float, default=0.0, help="the metric's levels, this many seed spreads apart")
    p.add_argument("--seed", type=int, default=SEED, help="the histories' seed (0-999; 7: the docs' histories)")
    a = p.parse_args()
    BUDGET, STEP, SEED = a.budget, a.step, a.seed
    if a.min_effect:
        smallest_move(a.histories, a.min_effect, [r.strip() for r in a.rows.split(",") if r.strip()])
        return
    if a.histories:
        simulated(a.histories, a.repeats, [r.strip() for r in a.rows.split(",") if r.strip()], not a.measured_only)
    if a.real:
        real(a.real, [float(s) for s in a.shifts.split(",")], tuple(t.strip() for t in a.tools.split(",")))


if __name__ == "__main__":
    main()
