"""The noisy searches as strategies: ``--flaky`` on verdicts, and on measured values.

Pure: no git, no I/O. :class:`Posterior` keeps the posterior over the culprit of
:mod:`rlbisect.bisect.bayes` for a predicate that can lie; :class:`MeasuredPosterior` is the same
strategy with numbers instead of verdicts (:mod:`rlbisect.bisect.measured`): every probe is one run
on the seed the search chooses (the predicate is wrapped to run one,
:mod:`rlbisect.bisect.predicates.measured_runs`), its value pooled with every other run. Runs that
failed count as the worst outcome; a commit's second skipped run bars it. Both mark into git only what they
are sure of, at the end; a round of ``--jobs J`` is J runs planned together.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

from rlbisect.bisect.strategies import Conclusion, GitView, Marks, Strategy, Verdicts
from rlbisect.errors import Cause, Status, Verdict

if TYPE_CHECKING:
    from rlbisect.bisect.bayes import Decision


class Posterior(Strategy):
    """``--flaky``: the posterior over the culprit along the first-parent chain; every run is a
    fresh sample, the endpoints included; git gets only the marks that are sure, at the end."""

    name = "posterior"
    recall = False
    first_parent_only = True

    def __init__(self, confidence: float = 0.95, max_runs: int | None = None, jobs: int = 1):
        self.confidence, self.max_runs, self.jobs = confidence, max_runs, jobs   # jobs: runs a round

    def start(self, history, good, bad, first_parent) -> None:
        from rlbisect.bisect.bayes import default_max_runs   # numpy, only for --flaky
        super().start(history, good, bad, True)
        self.order = [sha for sha, _ in history]           # position -> sha; 0 is GOOD
        self.merged = {sha: ps[1:] for sha, ps in history if len(ps) > 1}   # a merge's other parents
        self.pos = {sha: i for i, sha in enumerate(self.order)}
        self.search = self.new_search(len(self.order) - 1)
        self.max_runs = self.max_runs or default_max_runs(len(self.order) - 1)
        self.runs, self.last = 0, 1      # runs so far, and in the last round
        self.decision: Decision | None = None

    def stop_reached(self, p: float, sha: str) -> str:
        from rlbisect.bisect.bayes import needed
        stop = f"{round(needed(self.confidence), 12):.12g}"   # :g's 6 digits printed 0.9999995 as 1
        said = f"posterior {p:.{max(4, len(stop) - 2)}g}, the stop {stop} for --confidence {self.confidence:.12g}"
        if other := self.merged.get(sha):   # first parents only: the branch it brought in was not searched
            said += (f"; a merge: the change came in with its branch (other parent {other[0][:12]}), whose "
                     "commits the search, following first parents, did not run")
        return said

    def new_search(self, n: int) -> Any:
        from rlbisect.bisect.bayes import FlakySearch
        return FlakySearch(n)

    def replay(self, verdicts: Verdicts) -> None:
        """Runs an earlier ``--flaky`` bisect recorded: evidence, not counted against the budget."""
        for c, v in verdicts:
            if c in self.pos:
                self.search.observe(self.pos[c], v)

    def plan(self, git: GitView) -> list[str]:
        from rlbisect.bisect.noisy_batch import plan_round
        self.decision = self.search.decide(self.confidence, self.max_runs, self.runs, self.last)
        left = (self.max_runs or 0) - self.runs
        return [self.order[p] for p in plan_round(self.search, self.decision, self.jobs, left)]

    def observe(self, verdicts: Verdicts) -> Marks:
        self.last = max(len(verdicts), 1)
        for c, v in verdicts:
            self.runs += 1
            self.search.observe(self.pos[c], v)
        return []

    def final_marks(self) -> Marks:
        good_pos, bad_pos = self.search.sure_marks(self.confidence)
        marks: Marks = [(self.order[p], Verdict.SKIP) for p in sorted(self.search.skipped)
                 if 0 < p < len(self.order) - 1]
        if good_pos is not None and 0 < good_pos < len(self.order) - 1:
            marks.append((self.order[good_pos], Verdict.GOOD))
        if bad_pos is not None and 0 < bad_pos < len(self.order) - 1:
            marks.append((self.order[bad_pos], Verdict.BAD))
        return marks

    def top(self, count: int = 10) -> list[dict]:
        names = {0: "GOOD already bad", len(self.order): "no regression in range"}
        return [{"commit": self.order[k] if 0 < k < len(self.order) else names[k], "p": round(p, 6)}
                for k, p in self.search.top(count)]

    def report(self, outcome: str) -> dict[str, Any]:
        return {"confidence": self.confidence, "max_runs": self.max_runs, "n_runs": self.runs,
                "outcome": outcome, "posterior": self.top(), "rates": self.search.rates(),
                "runs_per_commit": {self.order[p]: n for p, n in
                                    self.search.runs_per_position().items()}}

    def conclude(self, git: GitView) -> Conclusion:
        d = self.decision or self.search.decide(self.confidence, self.max_runs, self.runs)
        extra = self.report(d.status)
        if d.status == "found":
            assert d.first_bad is not None   # set with status "found"
            sha = self.order[int(d.first_bad)]
            return Conclusion(Status.FOUND, sha, [sha], self.stop_reached(d.p, sha),
                              extra)
        if d.status == "no_regression":
            # "at least": a commit that made it fail less often (a fix, in a regression search) is
            # no step of this model, and its runs read as no change
            return Conclusion(Status.BAD_PASSES, message=f"BAD passes the predicate at least as often as "
                              f"GOOD (posterior {d.p:.3f} that no commit in the range made it fail more "
                              "often): nothing to bisect", extra=extra)
        if d.status == "good_fails":
            return Conclusion(Status.GOOD_FAILS, message=f"GOOD fails the predicate at least as often as BAD "
                              f"(posterior {d.p:.3f}): the regression is older than the range, or "
                              "the predicate is broken", extra=extra)
        cands = [self.order[k] for k in d.candidates if 0 < k < len(self.order)]
        why = {"skipped": "only skipped commits can still hold it",
               "unknown": f"the run budget ({self.max_runs} runs) is spent",
               "misfit": d.message or "the runs do not fit a one-change model"}.get(d.status, d.status)
        return Conclusion(Status.UNSURE, None, cands, f"not sure of the first bad commit: {why}", extra)

    def candidates(self) -> list[str]:
        return [self.order[k] for k in self.search.credible_set(self.confidence)
                if 0 < k < len(self.order)]



class MeasuredPosterior(Posterior):
    """``--flaky`` with a predicate that measures ``metric`` per run (see the module)."""

    name = "measured"

    def __init__(self, measures: tuple[str, str], confidence: float = 0.95,
                 max_runs: int | None = None, jobs: int = 1, min_effect: float | None = None):
        super().__init__(confidence, max_runs, jobs)
        self.metric, self.direction = measures
        if min_effect is not None and self.direction == "change":
            from rlbisect.errors import InputError
            raise InputError("--min-effect is a move one way: give --direction lower or higher")
        self.min_effect = min_effect

    def wrap(self, predicate: Any) -> Any:
        wrapped = predicate.one_run_per_probe()
        wrapped.seed_for = self.seed_for
        return wrapped

    def seed_for(self, commit: str) -> int:
        """The seed of the next run at ``commit``, taken (the search's choice: a commit's n-th run
        on seed n, so runs pair across commits, and a fresh draw where they would only repeat)."""
        pos = self.pos[commit]
        seed = self.search.next_seed(pos, self.pending)
        self.pending.append((pos, seed))
        return seed

    def new_search(self, n: int) -> Any:
        from rlbisect.bisect.measured import MeasuredSearch
        return MeasuredSearch(n, self.direction, min_effect=self.min_effect)  # type: ignore[arg-type]

    def start(self, history, good, bad, first_parent) -> None:
        super().start(history, good, bad, first_parent)
        self.pending: list[tuple[int, int]] = []   # (position, seed) of runs handed out, not yet back

    def _observe(self, commit: str, probe: Any) -> None:
        seed = probe.values.get("seed")
        seed = int(seed) if seed is not None and float(seed).is_integer() else None
        if seed is not None and (self.pos[commit], seed) in self.pending:
            self.pending.remove((self.pos[commit], seed))
        self.search.observe(self.pos[commit], self._value(probe), seed, probe.detail.get("fingerprint"))

    def _value(self, probe: Any) -> float | None:
        if probe.verdict is Verdict.GOOD and probe.cause is Cause.MEASURED:
            return float(probe.values.get(self.metric, math.nan))
        return math.nan if probe.verdict is Verdict.BAD else None   # failed: worst; skip: nothing

    def replay_probes(self, probes: Sequence[tuple[str, Any]]) -> None:
        for c, p in probes:
            if c in self.pos:
                self._observe(c, p)

    def observe_probes(self, probes: Sequence[tuple[str, Any]]) -> Marks:
        self.last = max(len(probes), 1)
        for c, p in probes:
            self.runs += 1
            self._observe(c, p)
        return []

    def observe(self, verdicts: Verdicts) -> Marks:
        raise TypeError("the measured search needs the probes' values: call observe_probes")

    def plan(self, git: GitView) -> list[str]:
        self.decision = d = self.search.decide(self.confidence, self.max_runs, self.runs, self.last)
        if (why := self._nothing_measured()) is not None:
            self.decision = d = replace(d, status="good_fails", message=why)
        if d.status != "probe" or d.probe is None:
            return []
        left = (self.max_runs or 0) - self.runs
        picks = [d.probe] if self.jobs <= 1 or left <= 1 else self.search.propose(min(self.jobs, left), d.probe)
        return [self.order[p] for p in picks]

    def _nothing_measured(self) -> str | None:
        """Every run at both ends failed: no number to compare, whatever else runs (all of them,
        ranked worst, read as "nothing changed", exit 5, when the command failed everywhere)."""
        from rlbisect.bisect.measured import START_RUNS
        s = self.search
        ends = [v for p, v in zip(s.positions, s.values) if p in (0, s.n)]
        if len(ends) < 2 * START_RUNS or any(math.isfinite(v) for v in ends):
            return None
        return (f"no run at GOOD or BAD gave a number for {self.metric} ({len(ends)} runs, each failed or NaN): "
                "the training command fails at GOOD too, or does not write that metric; run it by hand at GOOD")

    def top(self, count: int = 10) -> list[dict]:
        if self.search.blind() is not None:   # runs that are not draws: no posterior to show
            return []
        return [{"commit": self.order[k] if k else "nothing changed in the range", "p": round(p, 6)}
                for k, p in self.search.top(count)]

    def candidates(self) -> list[str]:
        return [] if self.search.blind() is not None else super().candidates()

    def report(self, outcome: str) -> dict[str, Any]:
        d = self.decision
        k = d.first_bad if d is not None and d.first_bad else int(self.search.top(1)[0][0])
        return {"confidence": self.confidence, "max_runs": self.max_runs, "n_runs": self.runs,
                "outcome": outcome, "metric": self.metric, "direction": self.direction, "min_effect": self.min_effect,
                "posterior": self.top(), "sides": self.search.sides(k) if k else {},
                "runs_per_commit": {self.order[p]: n for p, n in self.search.runs_per_position().items()}}

    def conclude(self, git: GitView) -> Conclusion:
        d = self.decision or self.search.decide(self.confidence, self.max_runs, self.runs)
        # the search speaks of positions; the user of commits
        self.decision = d = replace(d, message=re.sub(r"position (\d+)", lambda m: f"commit {self.order[int(m[1])][:10]}",
                                                      d.message))
        extra = self.report(d.status)
        if d.status == "found" and d.first_bad is not None:
            sha = self.order[d.first_bad]
            side = extra["sides"]
            moved = (f"; {self.metric} median {side['before']['median']:.4g} -> "
                     f"{side['after']['median']:.4g} over {side['before']['runs']} + "
                     f"{side['after']['runs']} runs") if side.get("after", {}).get("runs") else ""
            why = d.message or self.stop_reached(d.p, sha)
            return Conclusion(Status.FOUND, sha, [sha], f"{why}{moved}",
                              extra)
        if d.status == "no_regression":
            why = d.message or (f"posterior {d.p:.3f} that no commit in the range changed "
                                f"{self.metric}'s distribution")
            return Conclusion(Status.BAD_PASSES, message=f"no regression to bisect: {why}", extra=extra)
        if d.status == "good_fails":
            return Conclusion(Status.GOOD_FAILS, message=d.message, extra=extra)
        return super().conclude(git)
