"""How a bisect chooses what to probe, learns from verdicts, and decides it is done.

Pure: no git, no I/O. The driver (:mod:`rlbisect.bisect.driver`) runs the one loop — ask the
strategy for a round of commits, probe them, hand it the verdicts, put the marks it returns into
the real ``git bisect`` — and the strategy decides everything else:

* :class:`GitChoice` probes the commit git itself picks (``BISECT_HEAD``), one at a time: the
  same probes, skips included, as ``git bisect run``.
* :class:`KAry` (``--jobs J``) probes J commits per round that split the candidates into J + 1
  parts, marking every verdict into git: about ⌈log_(J+1) N⌉ rounds.
* :class:`Posterior` (``--flaky``) keeps a posterior over the culprit for a predicate that can
  lie (:mod:`rlbisect.bisect.bayes`), repeats runs where they inform most, and marks into git
  only what it is sure of, at the end.

No verdict without evidence: git trusts the user's GOOD and BAD, we do not. When the answer of a
deterministic search rests on an endpoint no probe has vouched for (no probe failed, so the answer
is BAD; or none passed, so it is the oldest commit), that endpoint is probed too; BAD passing or
GOOD failing ends the bisect with no culprit (exit 5 / 6). ``confirm_endpoints`` probes both up
front instead, as Chromium's Pinpoint does. The posterior probes its endpoints like any commit.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from rlbisect.bisect.options import BisectOptions
from rlbisect.bisect.search import BisectState
from rlbisect.errors import Status, Verdict

if TYPE_CHECKING:
    from rlbisect.bisect.bayes import Decision

Verdicts = Sequence[tuple[str, Verdict]]   # (commit, verdict), in probe order
Marks = list[tuple[str, Verdict]]          # what to tell git, in order


@dataclass
class Conclusion:
    """What the evidence supports."""

    status: Status
    first_bad: str | None = None
    candidates: list[str] = field(default_factory=list)
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GitState:
    """What a strategy is told of git's own bisection (``sandbox.Step`` has these fields)."""

    status: str                     # next | found | ambiguous
    commit: str | None = None       # git's pick (status next)
    first_bad: str | None = None
    candidates: list[str] = field(default_factory=list)


class GitView(Protocol):
    """What a strategy reads of git's bisection: a :class:`GitState` or a ``sandbox.Step``."""

    @property
    def status(self) -> str: ...
    commit: str | None
    first_bad: str | None
    candidates: list[str]


class Strategy(ABC):
    """The search policy of one bisect; see the module docstring."""

    name = "strategy"
    recall = True          # a cached verdict may stand in for a run (False: every run is fresh)
    first_parent_only = False

    def start(self, history: list[tuple[str, tuple[str, ...]]], good: str, bad: str,
              first_parent: bool) -> None:
        self.history, self.good, self.bad, self.first_parent = history, good, bad, first_parent
        self.dropped: list[str] = []   # commits of the last round whose verdict git would refuse

    def replay(self, verdicts: Verdicts) -> None:
        """Runs earlier bisects recorded for this predicate (strategies that do not recall
        verdicts, ``recall = False``, are handed them as evidence; others ignore them)."""

    @abstractmethod
    def plan(self, git: GitView) -> list[str]:
        """The commits to probe in the next round; empty when the search is over."""

    @abstractmethod
    def observe(self, verdicts: Verdicts) -> Marks:
        """Learn from a round; return the marks to put into git now, in order."""

    def final_marks(self) -> Marks:
        """Marks to put into git once the search is over."""
        return []

    @abstractmethod
    def conclude(self, git: GitView) -> Conclusion:
        """The answer, from the verdicts and git's final state."""

    def candidates(self) -> list[str]:
        """Possible first bad commits right now (for a stopped run)."""
        return []

    def report(self, outcome: str) -> dict[str, Any]:
        """What the strategy adds to the result's JSON (``outcome``: how the search ended)."""
        return {}


class GitChoice(Strategy):
    """git's own pick, one probe per round; endpoints confirmed when the answer rests on them."""

    name = "git"

    def __init__(self, confirm_endpoints: bool = False):
        self.confirm_up_front = confirm_endpoints

    def start(self, history, good, bad, first_parent) -> None:
        super().start(history, good, bad, first_parent)
        self.mirror = BisectState(dict(history), {good}, bad, first_parent)
        self.seen: dict[str, list[Verdict]] = {}     # every verdict, endpoints included

    def _said(self, verdict: Verdict, commits: Sequence[str] | None = None) -> bool:
        return any(verdict in vs for c, vs in self.seen.items() if commits is None or c in commits)

    def _refuted(self) -> bool:
        return self._said(Verdict.GOOD, [self.bad]) or self._said(Verdict.BAD, [self.good])

    def _unconfirmed(self) -> list[str]:
        """Endpoints the answer rests on that no probe has vouched for yet."""
        need = []
        if not self._said(Verdict.GOOD) and self.good not in self.seen:
            need.append(self.good)
        if not self._said(Verdict.BAD) and self.bad not in self.seen:
            need.append(self.bad)
        return need

    def plan(self, git: GitView) -> list[str]:
        if self._refuted():
            return []
        if self.confirm_up_front and not self.seen:
            return [self.good, self.bad]
        if git.status == "next" and git.commit is not None:
            return self.picks(git.commit)
        return self._unconfirmed()

    def picks(self, git_next: str) -> list[str]:
        return [git_next]

    def observe(self, verdicts: Verdicts) -> Marks:
        for c, v in verdicts:
            self.seen.setdefault(c, []).append(v)
        # goods oldest first, then bads newest first, then skips: for a monotone predicate every
        # mark stays valid; a mark git would refuse after the others (a flaky round) is dropped.
        order = {c: i for i, (c, _) in enumerate(self.history)}
        probed = [(c, v) for c, v in verdicts if c not in (self.good, self.bad)]
        ranked = sorted(probed, key=lambda cv: ({Verdict.GOOD: 0, Verdict.BAD: 1}.get(cv[1], 2),
                                                order.get(cv[0], 0) * (1 if cv[1] is Verdict.GOOD else -1)))
        marks, self.dropped = [], []
        for c, v in ranked:
            if c in set(self.mirror.candidates()) and c != self.mirror.bad:
                self.mirror.mark(c, v)
                marks.append((c, v))
            else:
                self.dropped.append(c)
        return marks

    def conclude(self, git: GitView) -> Conclusion:
        if self._said(Verdict.GOOD, [self.bad]):
            return Conclusion(Status.BAD_PASSES, message="BAD passes the predicate: nothing to bisect "
                              "(the regression is not in this range, or the predicate does not "
                              "show it)")
        if self._said(Verdict.BAD, [self.good]):
            same = {v for vs in self.seen.values() for v in vs} == {Verdict.BAD}
            return Conclusion(Status.GOOD_FAILS, message="GOOD fails the predicate" + (
                ", as every probe did: the predicate is probably broken (see its output)" if same
                else ": the regression is older than the range, or the predicate is broken"))
        vouched = self._said(Verdict.GOOD) and self._said(Verdict.BAD)
        if git.status == "found" and vouched:
            return Conclusion(Status.FOUND, git.first_bad, [git.first_bad or ""])
        missing = "" if vouched else (
            "not confirmed: the answer rests on an endpoint that could not be probed")
        return Conclusion(Status.AMBIGUOUS, None, list(git.candidates), missing)

    def candidates(self) -> list[str]:
        return self.mirror.candidates()


class KAry(GitChoice):
    """``jobs`` commits per round, splitting the candidates into ``jobs + 1`` near-equal parts."""

    name = "k-ary"

    def __init__(self, jobs: int, confirm_endpoints: bool = False):
        super().__init__(confirm_endpoints)
        self.jobs = jobs

    def picks(self, git_next: str) -> list[str]:
        # git still wants a commit when our mirror sees none left: follow git
        return self.mirror.next_probes(self.jobs) or [git_next]


class Posterior(Strategy):
    """``--flaky``: the posterior over the culprit along the first-parent chain; every run is a
    fresh sample, the endpoints included; git gets only the marks that are sure, at the end."""

    name = "posterior"
    recall = False
    first_parent_only = True

    def __init__(self, confidence: float = 0.95, max_runs: int | None = None, jobs: int = 1):
        self.confidence, self.max_runs, self.jobs = confidence, max_runs, jobs   # jobs: runs a round

    def start(self, history, good, bad, first_parent) -> None:
        from rlbisect.bisect import bayes   # numpy, only for --flaky
        super().start(history, good, bad, True)
        self.order = [sha for sha, _ in history]           # position -> sha; 0 is GOOD
        self.pos = {sha: i for i, sha in enumerate(self.order)}
        self.search = bayes.FlakySearch(len(self.order) - 1)
        self.max_runs = self.max_runs or bayes.default_max_runs(len(self.order) - 1)
        self.runs, self.last = 0, 1      # runs so far, and in the last round
        self.decision: Decision | None = None

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
            return Conclusion(Status.FOUND, sha, [sha], f"posterior {d.p:.3f} >= {self.confidence}",
                              extra)
        if d.status == "no_regression":
            return Conclusion(Status.BAD_PASSES, message=f"BAD passes the predicate as often as GOOD "
                              f"(posterior {d.p:.3f} that no commit in the range changed it): "
                              "nothing to bisect", extra=extra)
        if d.status == "good_fails":
            return Conclusion(Status.GOOD_FAILS, message=f"GOOD fails the predicate as often as BAD "
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


def make_strategy(options: BisectOptions) -> Strategy:
    """The search the options ask for."""
    if options.flaky:
        return Posterior(options.confidence or 0.95, options.max_runs, options.jobs)
    if options.jobs > 1:
        return KAry(options.jobs, options.confirm_endpoints)
    return GitChoice(options.confirm_endpoints)
