"""How a bisect chooses what to probe, learns from verdicts, and decides it is done.

Pure: no git, no I/O. The driver (:mod:`rlbisect.bisect.driver`) runs the one loop — ask the
strategy for a round of commits, probe them, hand it the verdicts, put the marks it returns into
the real ``git bisect`` — and the strategy decides everything else:

* :class:`GitChoice` probes the commit git itself picks (``BISECT_HEAD``), one at a time: the
  same probes, skips included, as ``git bisect run``.
* :class:`KAry` (``--jobs J``) probes J commits per round that split the candidates into J + 1
  parts, marking every verdict into git: about ⌈log_(J+1) N⌉ rounds.
* :class:`~rlbisect.bisect.posterior.Posterior` (``--flaky``) keeps a posterior over the culprit
  for a predicate that can lie (:mod:`rlbisect.bisect.bayes`), repeats runs where they inform most,
  and marks into git only what it is sure of, at the end; on measured runs (short runs with
  ``--metric``), :class:`~rlbisect.bisect.posterior.MeasuredPosterior` does so on the numbers.

No verdict without evidence: git trusts the user's GOOD and BAD, we do not. When the answer of a
deterministic search rests on an endpoint no probe has vouched for (no probe failed, so the answer
is BAD; or none passed, so it is the oldest commit), that endpoint is probed too; BAD passing or
GOOD failing ends the bisect with no culprit (exit 5 / 6). ``confirm_endpoints`` probes both up
front instead, as Chromium's Pinpoint does. The posterior probes its endpoints like any commit.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from rlbisect.bisect.options import BisectOptions
from rlbisect.bisect.search import BisectState
from rlbisect.errors import InputError, Status, Verdict

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
    merge_base: bool = False        # git will not go on until ``commit`` (a merge base) is marked


class GitView(Protocol):
    """What a strategy reads of git's bisection: a :class:`GitState` or a ``sandbox.Step``."""

    @property
    def status(self) -> str: ...
    commit: str | None
    first_bad: str | None
    candidates: list[str]
    merge_base: bool


class Strategy(ABC):
    """The search policy of one bisect; see the module docstring."""

    name = "strategy"
    recall = True          # a cached verdict may stand in for a run (False: every run is fresh)
    first_parent_only = False

    def start(self, history: list[tuple[str, tuple[str, ...]]], good: str, bad: str,
              first_parent: bool) -> None:
        self.history, self.good, self.bad, self.first_parent = history, good, bad, first_parent
        self.dropped: list[str] = []   # commits of the last round whose verdict git would refuse

    def wrap(self, predicate: Any) -> Any:
        """The predicate this search runs (the measured search asks for one seed per probe)."""
        return predicate

    def replay(self, verdicts: Verdicts) -> None:
        """Runs earlier bisects recorded for this predicate (strategies that do not recall
        verdicts, ``recall = False``, are handed them as evidence; others ignore them)."""

    def replay_probes(self, probes: Sequence[tuple[str, Any]]) -> None:
        """:meth:`replay` with the whole probes (their measured values too)."""
        self.replay([(c, p.verdict) for c, p in probes])

    def observe_probes(self, probes: Sequence[tuple[str, Any]]) -> Marks:
        """:meth:`observe` with the whole probes; a search that uses measured values reads them."""
        return self.observe([(c, p.verdict) for c, p in probes])

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
        self.asked: str | None = None                 # a merge base git insists on

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
            # a merge base git asks for is marked before git goes on, though no candidate of ours
            self.asked = git.commit if git.merge_base else None
            return [git.commit] if git.merge_base else self.picks(git.commit)
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
            elif c == self.asked:
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


def make_strategy(options: BisectOptions, predicate: Any = None) -> Strategy:
    """The search the options ask for; ``--flaky`` on a predicate that measures one number per
    run (short runs with ``--metric``) searches on the numbers themselves."""
    if options.flaky:
        from rlbisect.bisect.posterior import MeasuredPosterior, Posterior
        if getattr(predicate, "measures", None):
            return MeasuredPosterior(predicate.measures, options.confidence or 0.95, options.max_runs,
                                     options.jobs, options.min_effect)
        if options.min_effect is not None:
            raise InputError("--min-effect needs a predicate that measures a number: --predicate short-run "
                             "--metric M --direction lower|higher")
        return Posterior(options.confidence or 0.95, options.max_runs, options.jobs)
    if options.jobs > 1:
        return KAry(options.jobs, options.confirm_endpoints)
    return GitChoice(options.confirm_endpoints)
