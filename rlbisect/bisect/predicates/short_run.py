"""The ``short-run`` predicate: matched-seed training runs at the probe and at GOOD.

For faults that pass every invariant (an entropy penalty with the wrong sign, a reward that pays a
shortcut, a loss scale only the gradient norm shows) only training shows the regression. Each probe
trains for ``steps`` steps with seeds 0, 1, ...; GOOD is trained with the same seeds (once per
bisect, shared by all probes). Training is the user's own command (``-- python train.py --seed
{seed} --out {out}``) or a Python function (``--runner MOD:FN``, by default TinyAgent's), see
:mod:`.train_runs`.

Each run is scored per metric (:func:`rlbisect.runs.read.score`) and :class:`~rlbisect.runs.stats.Rule`
judges the probe against GOOD's seed spread, adding seeds only while the answer is unclear:

* by default the whole dashboard: every metric both sides log (the held-out one included), any
  change beyond the spread is a behaviour change, with the false-alarm rate held at ``alpha`` over
  all metrics and looks; the report names the metric(s) that moved, by how much, which way;
* with ``--metric NAME`` one number, in the ``--direction`` that counts as a regression.

Unknown at the cap is a skip: the bisect will not guess. A metric that is NaN/Inf at the probe
while finite at GOOD makes the probe bad.
"""

from __future__ import annotations

import json
import math
import statistics
import threading
from pathlib import Path
from typing import Callable, Literal

from pydantic import Field, model_validator

from rlbisect import __version__
from rlbisect.bisect.predicates import PREDICATES, BasePredicate, Kind, Options, PredicateError, Probe
from rlbisect.errors import Cause, Verdict
from rlbisect.metrics import comparable
from rlbisect.bisect.predicates.train_runs import CommandRunner, FunctionRunner
from rlbisect.runs.stats import Decision, Rule
from rlbisect.runs.judge import Question, dashboard, fingerprint, judge, no_spread
from rlbisect.runs.read import flatten, rename

DEFAULT_RUNNER = "reference_trainer.train:short_run"


class ShortRunOptions(Options):
    """Options of ``--predicate short-run``."""

    metric: str | None = Field(None, description="judge this one metric (with --direction) instead "
                               "of the whole dashboard, e.g. eval_pass")
    metrics: list[str] | None = Field(None, description="judge only these metrics, comma-separated "
                                      "(default: every metric both sides log)")
    direction: Literal["lower", "higher", "change"] | None = Field(
        None, description="with --metric: which change is a regression: lower (default), higher, "
        "or change (either way)")
    steps: int = Field(8, ge=1, description="training steps per run")
    seeds: int = Field(3, ge=2, description="matched seeds at the first look")
    max_seeds: int = Field(9, ge=2, description="seeds at most, before 'unknown' (a skip)")
    alpha: float = Field(0.05, gt=0, lt=1, description="false-alarm rate over all metrics and looks")
    window: int = Field(4, ge=1, description="a run's score: the mean of its last WINDOW rows")
    runner: str | None = Field(None, description="MODULE:FN with fn(steps, seed) -> metric rows, in "
                               f"the checkout (default without a command: {DEFAULT_RUNNER})")
    metrics_file: str = Field("{out}/metrics.jsonl", description="with a command: the JSONL, CSV or "
                              "TensorBoard file (or folder) each run writes, under {out} or "
                              "relative to where the command runs")
    metric_map: dict[str, str] = Field(default_factory=dict, description="THEIRS=OURS renames, "
                                       "e.g. train/reward=reward,eval/accuracy=eval_pass")

    @model_validator(mode="after")
    def _consistent(self) -> "ShortRunOptions":
        if self.seeds > self.max_seeds:
            raise ValueError(f"--seeds {self.seeds} is more than --max-seeds {self.max_seeds}")
        if self.metric and self.metrics:
            raise ValueError("give --metric (one number) or --metrics (a dashboard), not both")
        if self.direction and not self.metric:
            raise ValueError("--direction needs --metric: the dashboard counts a change either way")
        return self


class ShortRunPredicate(BasePredicate):
    def __init__(self, options: ShortRunOptions, command: list[str] | None = None):
        self.options = o = options
        if command and o.runner:
            raise PredicateError("short-run: give a training command after -- or --runner, not both")
        if not command and "metrics_file" in o.model_fields_set:
            raise PredicateError("short-run: --metrics-file is where a training command (after --) "
                                 "writes; a --runner returns its rows")
        self.runner = CommandRunner(command, o.metrics_file) if command \
            else FunctionRunner(o.runner or DEFAULT_RUNNER)
        self.rule = Rule(alpha=o.alpha, k0=o.seeds, max_seeds=o.max_seeds, paired=True)   # matched seeds
        self.good: str | None = None
        self._checkout_good: Callable[[], Path] | None = None
        self._good_runs: dict[int, list[dict]] = {}
        self._good_tree: Path | None = None
        self._lock = threading.Lock()

    def setup(self, good: str, checkout: Callable[[], Path]) -> None:
        """Called by the driver before the first probe: GOOD's id and how to check it out."""
        self.good, self._checkout_good = good, checkout

    def preflight(self, repo, commit: str) -> None:
        self.runner.preflight(repo, commit)

    @property
    def measures(self) -> tuple[str, str] | None:
        """``(metric, direction)`` when each run gives one number to search on (``--metric``)."""
        o = self.options
        return (o.metric, o.direction or "lower") if o.metric else None

    def one_run_per_probe(self):
        """This predicate as the measured search runs it: one seed per probe."""
        from rlbisect.bisect.predicates.measured_runs import MeasuredRuns
        return MeasuredRuns(self)

    def identity(self) -> str:
        # GOOD is part of the identity: the verdict is relative to it.
        return json.dumps({"kind": "short-run", **self.options.model_dump(), **self.runner.identity(),
                           "good": self.good, "rlbisect": __version__}, sort_keys=True)

    def __getstate__(self) -> dict:   # a Ray task gets a copy: locks do not travel
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    def _train(self, worktree: Path, seeds: list[int], timeout: float | None):
        runs = self.runner.runs(worktree, seeds, self.options.steps, timeout)
        rows = {s: rename([flatten(r) for r in rs], self.options.metric_map) for s, rs in runs.rows.items()}
        return rows, runs.failure, runs.seconds

    def _good(self, seeds: list[int], timeout: float | None):
        """GOOD's runs for ``seeds``, training only the missing ones (once, shared by all probes)."""
        with self._lock:   # with --jobs, probes share GOOD's runs instead of racing to make them
            missing = [s for s in seeds if s not in self._good_runs]
            seconds = 0.0
            if missing:
                if self._checkout_good is None:
                    raise RuntimeError("short-run needs the driver to call setup() with GOOD first")
                if self._good_tree is None:
                    self._good_tree = self._checkout_good()
                got, failed, seconds = self._train(self._good_tree, missing, timeout)
                if failed is not None:   # a problem at GOOD says nothing about this commit
                    return None, Probe(Verdict.SKIP, reason=f"at GOOD: {failed.reason}", seconds=seconds,
                                       cause=Cause.REFERENCE, output=failed.output), seconds
                self._good_runs.update(got)
            return {s: self._good_runs[s] for s in seeds}, None, seconds

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe:
        probe_runs: dict[int, list[dict]] = {}
        total = 0.0
        for k in self.rule.schedule():
            seeds = list(range(k))
            good, failed, seconds = self._good(seeds, timeout)
            total += seconds
            why = no_spread(good, seeds) if good is not None else None
            if why is not None:
                failed = Probe(Verdict.SKIP, reason=why, cause=Cause.CANNOT_RUN)
            if failed is None:
                got, failed, seconds = self._train(worktree, [s for s in seeds if s not in probe_runs],
                                                   timeout)
                total += seconds
            if failed is not None:
                failed.seconds = total
                return failed
            probe_runs.update(got)
            verdict = self._judge(good, {s: probe_runs[s] for s in seeds}, total)
            if isinstance(verdict, Probe) or verdict.verdict != "unknown":
                break
        if isinstance(verdict, Probe):
            return verdict
        # the same seeds, the same logged rows (of --metric's, with one): the verdict is an identity,
        # not a test at the spread
        def logged(rows: list[dict]) -> list:
            return [r.get(self.options.metric) if self.options.metric else comparable(r) for r in rows]
        same = all(logged(good[s]) == logged(probe_runs[s]) for s in seeds)
        probe = self._probe(verdict, seeds, total, same)
        probe.detail["prints"] = {side: [fingerprint(runs[s]) for s in seeds]
                                  for side, runs in (("good", good), ("probe", probe_runs))}
        return probe

    def confirm(self, culprit: str, parent: str, checkout: Callable[[str], Path], timeout: float | None) -> Probe:
        """The culprit's runs judged against its parent's (instead of GOOD's), by the same rule, on
        seeds no probe used (9, 10, ...: the runs the search made were chosen by it, so they would
        lean toward the step it took): BAD when the step the answer names is itself a move beyond
        the seed spread, else GOOD or SKIP after every seed (a step missed here withdraws an
        answer, so "alike" is never said early)."""
        runs: dict[str, dict] = {parent: {}, culprit: {}}
        trees: dict[str, Path] = {}
        total, trained, first = 0.0, 0, self.rule.max_seeds
        for k in self.rule.schedule():
            seeds = list(range(first, first + k))
            for c in (parent, culprit):
                if missing := [s for s in seeds if s not in runs[c]]:
                    got, failed, seconds = self._train(trees.get(c) or trees.setdefault(c, checkout(c)),
                                                       missing, timeout)
                    total, trained = total + seconds, trained + len(missing)
                    if failed is not None:
                        failed.seconds, failed.detail = total, {"trained": trained}
                        return failed
                    runs[c].update(got)
            verdict = self._judge({s: runs[parent][s] for s in seeds}, {s: runs[culprit][s] for s in seeds}, total)
            if isinstance(verdict, Probe) or verdict.verdict == "bad":   # "alike" is only said at the cap
                break
        if isinstance(verdict, Probe):
            verdict.detail = {**verdict.detail, "trained": trained}
            return verdict
        probe = self._probe(verdict, seeds, total, False)
        probe.detail["trained"] = trained
        probe.reason = probe.reason.replace(" at GOOD", " at the parent")
        return probe

    def drawn(self, records) -> list[tuple[str, Probe]]:
        """Every run the probes in ``records`` trained, as the measured search's one-run probes
        (:func:`drawn_runs`), for a search that switches to it: runs already paid for."""
        return drawn_runs(records, str(self.good), self.options.metric or "")

    def _judge(self, good: dict, probe: dict, seconds: float) -> Decision | Probe:
        """The rule's decision at this look, or the probe it already implies (a metric gone
        non-finite, a metric asked for that is not logged, nothing to compare)."""
        o = self.options
        j = judge(good, probe, self.rule, Question(o.metric, o.metrics, o.direction, o.window))
        if j.absent:
            metric, side = j.absent[0]
            side, runs = ("GOOD's", good) if side == "GOOD" else ("this commit's", probe)
            have = dashboard(runs.values())
            hint = "" if o.metric or o.metrics else (" while every run of GOOD's does: renamed (--metric-map "
                                                     "THEIRS=OURS) or no longer logged (--metrics to choose)?")
            return Probe(Verdict.SKIP, reason=f"{metric} is not in {side} runs (they log: "
                         f"{', '.join(have) or 'nothing'}){hint}", seconds=seconds, cause=Cause.CANNOT_RUN)
        if j.went_nonfinite:
            m, how = next(iter(j.went_nonfinite.items()))
            return Probe(Verdict.BAD, {m: statistics.fmean(j.other[m])}, f"{m} is not a finite number at "
                         f"this commit ({how}) while GOOD's is", seconds, Cause.RAISED, detail={
                             "seeds": sorted(probe), "metrics": [{"metric": m, "good": j.good[m],
                                                                  "probe": j.other[m], "p": 0.0, "decides": True}]})
        if j.decision is None:   # more seeds cannot help: nothing to compare
            return Probe(Verdict.SKIP, reason="no metric is logged (finite) by both GOOD's runs and this "
                         f"commit's (GOOD: {', '.join(j.good) or 'none'}; here: {', '.join(j.other) or 'none'})",
                         seconds=seconds, cause=Cause.CANNOT_RUN)
        return j.decision

    def _probe(self, d: Decision, seeds: list[int], seconds: float, reproduced: bool) -> Probe:
        o = self.options
        shown = d.deciding or d.tests[:1]
        # every metric's mean at this commit, most-moved first: what diagnose sets beside the parent's
        values = {t.metric: statistics.fmean(t.probe) for t in d.tests}
        values["seeds"] = float(len(seeds))
        detail = {"mode": "metric" if o.metric else "dashboard", "seeds": seeds, "reproduced": reproduced,
                  "threshold": d.threshold,
                  "metrics": [{"metric": t.metric, "good": t.good, "probe": t.probe, "p": t.p,
                               "moved": t.moved, "spreads": t.spreads if math.isfinite(t.spreads) else None,
                               "direction": t.direction, "decides": t in d.deciding}
                              for t in d.tests]}
        over = f"over {len(seeds)} seeds"
        if d.verdict == "unknown":
            return Probe(Verdict.SKIP, values, f"unknown after {len(seeds)} seeds: {shown[0].describe()}; the seed "
                         "spread hides any difference; skipped, not guessed", seconds, Cause.UNDECIDED,
                         detail=detail)
        if d.verdict == "bad":
            more = f"; +{len(d.deciding) - 1} more" if len(d.deciding) > 1 else ""
            word = "worse" if o.metric and o.direction != "change" else "moved beyond GOOD's seed spread"
            return Probe(Verdict.BAD, values, f"{word} {over}: {shown[0].describe()}{more}", seconds,
                         detail=detail)
        if not o.metric:
            said = f"none of {len(d.tests)} metrics moved beyond GOOD's seed spread"
        else:
            said = f"{o.metric} {'did not move' if o.direction == 'change' else 'is not worse'}"
        return Probe(Verdict.GOOD, values, f"{said} {over} (closest: {shown[0].describe()})", seconds,
                     detail=detail)


PREDICATES.register("short-run", Kind(
    lambda spec: ShortRunPredicate(spec.options, spec.command), ShortRunOptions,
    "matched-seed short training runs against GOOD (your training command after --, or a runner), "
    "judged on the whole dashboard", "command"))


def drawn_runs(records, good: str, metric: str) -> list[tuple[str, Probe]]:
    """Every run the probes in ``records`` (report records) trained, GOOD's and each probed
    commit's, read from their per-seed evidence (``detail``), as one-run probes scoring ``metric``
    on their seed (wherever they ran: a remote executor's nodes, an earlier bisect's cache). GOOD's
    runs, in every record, are read once. A run whose score repeats one with the same seed at
    another commit stays: the measured search reads the repeat as such (measured_pairs). A check
    against the parent is not read: its other side is not GOOD."""
    seen: set[tuple[str, int]] = set()
    out = []
    for rec in records:
        seeds = rec.detail.get("seeds")
        sides = [m for m in rec.detail.get("metrics", []) if m.get("metric") == metric]
        if rec.role == "confirm" or seeds is None or not sides:
            continue
        prints = rec.detail.get("prints") or {}   # absent from runs recorded before fingerprints
        for commit, side in ((good, "good"), (rec.commit, "probe")):
            for seed, value, fp in zip(seeds, sides[0][side], prints.get(side) or [None] * len(seeds)):
                if (str(commit), seed) in seen:
                    continue
                seen.add((str(commit), seed))
                out.append((str(commit), Probe(Verdict.GOOD, {metric: value, "seed": float(seed)},
                                               f"{metric} = {value:.4g} with seed {seed}", 0.0,
                                               Cause.MEASURED, detail={"fingerprint": fp} if fp else {})))
    return out
