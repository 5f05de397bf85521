"""The ``short-run`` predicate: matched-seed training runs at the probe and at GOOD.

For faults that pass every invariant (an entropy penalty with the wrong sign, a reward that measures
a proxy) only training shows the regression. Each probe trains for ``steps`` steps with seeds
0, 1, ...; GOOD is trained with the same seeds (once per bisect, shared by all probes); each run is
scored by the metric (the mean of its last ``window`` rows, or the last logged value for
``eval_pass``), and :class:`~rlbisect.bisect.stats.Rule` decides good / bad / unknown from the
seed spread, adding seeds while uncertain. Unknown at the cap is a skip: the bisect will not guess.

Runs happen in a ``python -I`` worker with the commit's checkout first on ``sys.path`` (the code
under test from the commit, rlbisect from the installed package), calling a runner ``fn(steps,
seed) -> rows`` (default: TinyAgent's ``reference_trainer.train:short_run``; yours with
``--runner MOD:FN``). When the runner raises from the commit's code, or its metric is NaN/Inf while
GOOD's is finite, the commit is bad, with the message; when the runner cannot be imported there,
it is skipped.

    python -I -m rlbisect.bisect.predicates.short_run CHECKOUT --steps 8 --seeds 0,1,2
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import threading
from pathlib import Path
from typing import Callable, Literal

from pydantic import Field, model_validator

from rlbisect import __version__
from rlbisect.bisect.predicates import Options, Probe, register_predicate, tail
from rlbisect.bisect.predicates.command import run_command
from rlbisect.bisect.stats import Rule

RAISED = 3   # worker exit code: the code under test raised (see the invariants worker)


class ShortRunOptions(Options):
    """Options of ``--predicate short-run``."""

    metric: str = Field("reward", description="the logged metric to compare, or eval_pass")
    steps: int = Field(8, ge=1, description="training steps per run")
    seeds: int = Field(3, ge=1, description="matched seeds at the first look")
    max_seeds: int = Field(9, ge=1, description="seeds at most, before 'unknown' (a skip)")
    direction: Literal["lower", "higher", "change"] = Field(
        "lower", description="which change is a regression: lower, higher, or any change")
    alpha: float = Field(0.05, gt=0, lt=1, description="false-alarm rate over all looks")
    window: int = Field(4, ge=1, description="a run's score: the mean of its last WINDOW rows")
    runner: str = Field("reference_trainer.train:short_run",
                        description="MODULE:FN with fn(steps, seed) -> metric rows, in the checkout")

    @model_validator(mode="after")
    def _seeds(self) -> "ShortRunOptions":
        if self.seeds > self.max_seeds:
            raise ValueError(f"--seeds {self.seeds} is more than --max-seeds {self.max_seeds}")
        return self


class ShortRunPredicate:
    def __init__(self, options: ShortRunOptions):
        self.options = o = options
        self.rule = Rule(alpha=o.alpha, k0=o.seeds, max_seeds=o.max_seeds)
        self.good: str | None = None
        self._checkout_good: Callable[[], Path] | None = None
        self._good_scores: dict[int, float] = {}
        self._good_tree: Path | None = None
        self._lock = threading.Lock()

    def setup(self, good: str, checkout: Callable[[], Path]) -> None:
        """Called by the driver before the first probe: GOOD's id and how to check it out."""
        self.good, self._checkout_good = good, checkout

    def identity(self) -> str:
        # GOOD is part of the identity: the verdict is relative to it.
        return json.dumps({"kind": "short-run", **self.options.model_dump(), "good": self.good,
                           "rlbisect": __version__}, sort_keys=True)

    def __getstate__(self) -> dict:   # a Ray task gets a copy: locks do not travel
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    def _scores(self, worktree: Path, seeds: list[int], timeout: float | None
                ) -> tuple[dict | None, Probe | None, float]:
        """({seed: score} or None, the probe to return on failure, seconds)."""
        o = self.options
        argv = [sys.executable, "-I", "-m", __name__, str(worktree), "--runner", o.runner,
                "--steps", str(o.steps), "--metric", o.metric, "--window", str(o.window),
                "--seeds", ",".join(map(str, seeds))]
        r = run_command(argv, worktree, timeout)
        if r.interrupted:
            return None, Probe("skip", reason="interrupted", seconds=r.seconds,
                               cacheable=False), r.seconds
        if r.timed_out:
            return None, Probe("skip", reason=f"timed out after {timeout:g}s", seconds=r.seconds,
                               cacheable=False), r.seconds
        try:
            return {int(k): float(v) for k, v in json.loads(r.stdout).items()}, None, r.seconds
        except (ValueError, AttributeError):
            output = tail(r.stderr)
            last = (output.splitlines() or [f"exit {r.returncode}"])[-1]
            verdict, what = ("bad", "the trainer raised") if r.returncode == RAISED \
                else ("skip", "could not train")
            return None, Probe(verdict, reason=f"{what}: {last}", seconds=r.seconds,
                               output=output), r.seconds

    def _good(self, seeds: list[int], timeout: float | None
              ) -> tuple[list[float] | None, Probe | None, float]:
        """GOOD's scores for ``seeds``, training only the missing ones (once, shared by all probes)."""
        with self._lock:   # with --jobs, probes share GOOD's runs instead of racing to make them
            missing = [s for s in seeds if s not in self._good_scores]
            seconds = 0.0
            if missing:
                if self._checkout_good is None:
                    raise RuntimeError("short-run needs the driver to call setup() with GOOD first")
                if self._good_tree is None:
                    self._good_tree = self._checkout_good()
                got, failed, seconds = self._scores(self._good_tree, missing, timeout)
                if failed is not None:   # a problem at GOOD says nothing about this commit
                    return None, Probe("skip", reason=f"at GOOD: {failed.reason}", seconds=seconds,
                                       cacheable=False, output=failed.output), seconds
                self._good_scores.update(got)
            return [self._good_scores[s] for s in seeds], None, seconds

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe:
        metric, probe_scores, total = self.options.metric, {}, 0.0
        for k in self.rule.schedule():
            seeds = list(range(k))
            good, failed, seconds = self._good(seeds, timeout)
            total += seconds
            if failed is None:
                got, failed, seconds = self._scores(
                    worktree, [s for s in seeds if s not in probe_scores], timeout)
                total += seconds
            if failed is not None:
                failed.seconds = total
                return failed
            probe_scores.update(got)
            probe = [probe_scores[s] for s in seeds]
            if not all(map(math.isfinite, probe)) and all(map(math.isfinite, good)):
                return Probe("bad", {f"{metric}@good": statistics.fmean(good)},
                             f"{metric} is not finite at this commit ({probe}) while GOOD's is",
                             total)
            verdict, p = self.rule.decide(good, probe, self.options.direction)
            if verdict != "unknown":
                break
        values = {f"{metric}@probe": statistics.fmean(probe), f"{metric}@good": statistics.fmean(good),
                  "p": p, "seeds": float(len(probe))}
        if verdict == "unknown":
            return Probe("skip", values, f"unknown after {len(probe)} seeds (p={p:.3g}): the seed "
                         "spread hides any difference; skipped, not guessed", total)
        moved = values[f"{metric}@probe"] - values[f"{metric}@good"]
        word = ("moved" if self.options.direction == "change" else "worse") if verdict == "bad" \
            else ("did not move" if self.options.direction == "change" else "not worse")
        where = "up" if moved > 0 else "down"
        return Probe(verdict, values, f"{metric} {values[f'{metric}@probe']:.3g} vs "
                     f"{values[f'{metric}@good']:.3g} at GOOD over {len(probe)} seeds: {word}"
                     f"{f' ({where})' if verdict == 'bad' else ''} (p={p:.3g})", total)


register_predicate("short-run", lambda spec: ShortRunPredicate(spec.options), ShortRunOptions,
                   "matched-seed short training runs against GOOD, judged on the seed spread")


def score(rows: list[dict], metric: str, window: int) -> float:
    """A run's score: the mean of ``metric`` over its last ``window`` rows that log it
    (the last value alone for ``eval_pass``, which is logged on evaluation steps only)."""
    logged = [r[metric] for r in rows if metric in r]
    if not logged:
        raise KeyError(f"metric {metric!r} is not in the run's rows "
                       f"(have: {', '.join(sorted(rows[-1])) if rows else 'no rows'})")
    tail_rows = logged[-1:] if metric == "eval_pass" else logged[-window:]
    return statistics.fmean(tail_rows)


def main(argv: list[str] | None = None) -> int:
    """Worker: train the commit's code with each seed, print {seed: score} as JSON."""
    import argparse
    import importlib
    import traceback

    from rlbisect.bisect.predicates.invariants import raised_in
    p = argparse.ArgumentParser(prog="python -m " + __name__)
    p.add_argument("worktree")
    p.add_argument("--runner", default=ShortRunOptions().runner)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--metric", default="reward")
    p.add_argument("--window", type=int, default=4)
    p.add_argument("--seeds", default="0,1,2")
    a = p.parse_args(argv)
    worktree = Path(a.worktree).resolve()
    sys.path.insert(0, str(worktree))
    try:
        module, name = a.runner.rsplit(":", 1)
        fn = getattr(importlib.import_module(module), name)
    except Exception as e:   # the runner is not there at this commit: untestable
        print(f"short-run: cannot load {a.runner}: {type(e).__name__}: {e}".splitlines()[0],
              file=sys.stderr)
        return 2
    try:
        out = {s: score(fn(a.steps, s), a.metric, a.window) for s in map(int, a.seeds.split(","))}
    except Exception as e:
        traceback.print_exc(limit=-4)
        print(f"short-run: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
        return RAISED if raised_in(e, worktree) else 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
