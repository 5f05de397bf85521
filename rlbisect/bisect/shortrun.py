"""The `short-run` bisect predicate: matched-seed training runs at the probe and at GOOD.

For faults that pass every invariant (an entropy penalty with the wrong sign, a reward that measures
a proxy) only training shows the regression. Each probe trains for `steps` steps with seeds
0, 1, ...; GOOD is trained with the same seeds (once per bisect, cached); each run is scored by
the metric (the mean of its last `window` rows, or the last logged value for `eval_pass`), and
`stats.Rule` decides good / bad / unknown from the seed spread, adding seeds while uncertain.
Unknown at the cap is a skip: the bisect will not guess.

Runs happen in a `python -I` worker with the commit's worktree first on `sys.path` (the code under
test from the commit, rlbisect from the installed package), calling a runner `fn(steps, seed) ->
rows` (default: TinyAgent's `reference_trainer.train:short_run`; yours with `--runner MOD:FN`).

    python -I -m rlbisect.bisect.shortrun WORKTREE --steps 8 --seeds 0,1,2 --metric reward
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
from pathlib import Path
from typing import Callable

from rlbisect import __version__
from rlbisect.bisect.predicates import PredicateError, PredicateSpec, Probe, _tail, register_predicate, run_command
from rlbisect.bisect.stats import Rule

OPTIONS = {"metric": "reward", "steps": "8", "seeds": "3", "max_seeds": "9", "direction": "lower",
           "alpha": "0.05", "window": "4", "runner": "reference_trainer.train:short_run"}


class ShortRunPredicate:
    def __init__(self, options: dict[str, str]):
        unknown = set(options) - set(OPTIONS)
        if unknown:
            raise PredicateError(f"short-run takes no option {sorted(unknown)[0]!r} (options: {', '.join(OPTIONS)})")
        o = {**OPTIONS, **options}
        try:
            self.steps, self.window = int(o["steps"]), int(o["window"])
            self.rule = Rule(alpha=float(o["alpha"]), k0=int(o["seeds"]), max_seeds=int(o["max_seeds"]))
        except ValueError as e:
            raise PredicateError(f"short-run: {e}") from None
        if o["direction"] not in ("lower", "higher", "change"):
            raise PredicateError("short-run: direction must be lower, higher or change")
        if self.steps < 1 or not 1 <= self.rule.k0 <= self.rule.max_seeds or not 0 < self.rule.alpha < 1:
            raise PredicateError("short-run: need steps >= 1, 1 <= seeds <= max_seeds and 0 < alpha < 1")
        self.metric, self.direction, self.runner = o["metric"], o["direction"], o["runner"]
        self.options = o
        self.good: str | None = None
        self._checkout_good: Callable[[], Path] | None = None
        self._good_scores: dict[int, float] = {}
        self._good_tree: Path | None = None
        self._lock = threading.Lock()

    def setup(self, good: str, checkout: Callable[[], Path]) -> None:
        """Called by the bisect before the first probe (see predicates.bind)."""
        self.good, self._checkout_good = good, checkout

    def identity(self) -> str:
        # GOOD is part of the identity: the verdict is relative to it.
        return json.dumps({"kind": "short-run", **self.options, "good": self.good, "rlbisect": __version__},
                          sort_keys=True)

    def __getstate__(self) -> dict:   # a Ray task gets a copy: locks do not travel
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    def _scores(self, worktree: Path, seeds: list[int], timeout: float | None) -> tuple[dict | None, Probe | None, float]:
        """({seed: score} or None, the skip to return on failure, seconds)."""
        argv = [sys.executable, "-I", "-m", "rlbisect.bisect.shortrun", str(worktree), "--runner", self.runner,
                "--steps", str(self.steps), "--metric", self.metric, "--window", str(self.window),
                "--seeds", ",".join(map(str, seeds))]
        r = run_command(argv, worktree, timeout)
        if r.interrupted:
            return None, Probe("skip", reason="interrupted", seconds=r.seconds, cacheable=False), r.seconds
        if r.timed_out:
            return None, Probe("skip", reason=f"timed out after {timeout:g}s", seconds=r.seconds, cacheable=False), r.seconds
        try:
            return {int(k): float(v) for k, v in json.loads(r.stdout).items()}, None, r.seconds
        except (ValueError, AttributeError):
            last = _tail(r.stderr).splitlines()[-1:] or [f"exit {r.returncode}"]
            return None, Probe("skip", reason=f"could not train: {last[0]}", seconds=r.seconds,
                               output=_tail(r.stderr)), r.seconds

    def _good(self, seeds: list[int], timeout: float | None) -> tuple[list[float] | None, Probe | None, float]:
        """GOOD's scores for `seeds`, training only the missing ones (once, shared by all probes)."""
        with self._lock:   # with --jobs, probes share GOOD's runs instead of racing to make them
            missing = [s for s in seeds if s not in self._good_scores]
            seconds = 0.0
            if missing:
                if self._checkout_good is None:
                    raise RuntimeError("short-run needs the bisect to call setup() with GOOD first")
                if self._good_tree is None:
                    self._good_tree = self._checkout_good()
                got, failed, seconds = self._scores(self._good_tree, missing, timeout)
                if failed is not None:
                    failed.reason = f"at GOOD: {failed.reason}"
                    failed.cacheable = False   # a problem at GOOD says nothing about this commit
                    return None, failed, seconds
                self._good_scores.update(got)
            return [self._good_scores[s] for s in seeds], None, seconds

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe:
        probe_scores: dict[int, float] = {}
        total = 0.0   # training time of this probe, GOOD's first runs included
        for k in self.rule.schedule():
            seeds = list(range(k))
            good, failed, seconds = self._good(seeds, timeout)
            total += seconds
            if failed is None:
                got, failed, seconds = self._scores(worktree, [s for s in seeds if s not in probe_scores], timeout)
                total += seconds
            if failed is not None:
                failed.seconds = total
                return failed
            probe_scores.update(got)
            probe = [probe_scores[s] for s in seeds]
            verdict, p = self.rule.decide(good, probe, self.direction)
            if verdict != "unknown":
                break
        values = {f"{self.metric}@probe": statistics.fmean(probe), f"{self.metric}@good": statistics.fmean(good),
                  "p_worse": p, "seeds": float(len(probe))}
        if verdict == "unknown":
            return Probe("skip", values, f"unknown after {len(probe)} seeds (p={p:.3g}): the seed spread hides "
                         "any difference; skipped, not guessed", total)
        word = "worse" if verdict == "bad" else "not worse"
        return Probe(verdict, values, f"{self.metric} {values[f'{self.metric}@probe']:.3g} vs "
                     f"{values[f'{self.metric}@good']:.3g} at GOOD over {len(probe)} seeds: {word} (p={p:.3g})", total)


def _factory(spec: PredicateSpec) -> ShortRunPredicate:
    if spec.command or spec.arg:
        raise PredicateError("the short-run predicate takes no command; set it up with --option KEY=VALUE")
    return ShortRunPredicate(spec.options)


register_predicate("short-run", _factory, "matched-seed short training runs against GOOD, judged on the seed spread")


def score(rows: list[dict], metric: str, window: int) -> float:
    """A run's score: the mean of `metric` over its last `window` rows that log it
    (the last value alone for `eval_pass`, which is logged on evaluation steps only)."""
    logged = [r[metric] for r in rows if metric in r]
    if not logged:
        raise KeyError(f"metric {metric!r} is not in the run's rows (have: {', '.join(sorted(rows[-1]))})")
    tail = logged[-1:] if metric == "eval_pass" else logged[-window:]
    return statistics.fmean(tail)


def main(argv: list[str] | None = None) -> int:
    """Worker: train the commit's code with each seed, print {seed: score} as JSON."""
    import argparse
    import importlib
    p = argparse.ArgumentParser(prog="rlbisect.bisect.shortrun")
    p.add_argument("worktree")
    p.add_argument("--runner", default=OPTIONS["runner"])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--metric", default="reward")
    p.add_argument("--window", type=int, default=4)
    p.add_argument("--seeds", default="0,1,2")
    a = p.parse_args(argv)
    sys.path.insert(0, str(Path(a.worktree).resolve()))
    try:
        module, name = a.runner.rsplit(":", 1)
        fn = getattr(importlib.import_module(module), name)
        out = {s: score(fn(a.steps, s), a.metric, a.window) for s in map(int, a.seeds.split(","))}
    except Exception as e:   # untestable commit (import error, crash): the parent skips it
        print(f"short-run: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
