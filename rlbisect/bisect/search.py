"""Which commit to probe next: the bisection algorithm, apart from git.

Pure: no git, no torch, no I/O. The history is a parents map (``{sha: (parent, ...)}``), the
search state is the set of good commits, the current bad commit and the verdicts so far. Names
are opaque strings, so tests can use ``"c1"``, ``"c2"``, ...

Definitions (the same as git's):

* the *candidates* are the possible first bad commits: ancestors of the current bad commit
  (itself included) that are not ancestors of any good commit;
* the *weight* of a candidate is the number of candidates it reaches (itself included);
  probing a commit of weight ``w`` out of ``n`` candidates leaves ``w`` candidates if it is bad
  and ``n - w`` if it is good, so the best single probe has ``w`` closest to ``n / 2``.

With one probe at a time on a linear history, :meth:`BisectState.next_probes` picks the same
commit as ``git bisect`` (including git's shortcuts, see :func:`_git_halfway`). With skipped
commits and on merges git's choice can differ (it uses a pseudo-random walk away from skipped
commits); the orchestrator therefore follows git's own choice and uses this module for
``--jobs`` and for the remaining-candidates count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from rlbisect.errors import Verdict

Parents = Mapping[str, Sequence[str]]


def linear_history(commits: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Parents map of a straight line of commits given oldest first."""
    return {c: ((commits[i - 1],) if i else ()) for i, c in enumerate(commits)}


def ancestors(parents: Parents, start: Iterable[str], first_parent: bool = False) -> set[str]:
    """Every commit reachable from ``start`` (included), following only first parents if asked."""
    seen: set[str] = set()
    stack = list(start)
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        ps = parents.get(c, ())
        stack.extend(ps[:1] if first_parent else ps)
    return seen


def _git_halfway(weight: int, n: int) -> bool:
    """git's ``approx_halfway``: exactly halfway, or within ~0.1% of it for large ranges."""
    diff = 2 * weight - n
    return -1 <= diff <= 1 or abs(diff) < n // 1024


@dataclass
class BisectState:
    """Search state of one bisection: history, goods, the current bad and every verdict.

    ``parents`` must contain at least every commit between the good commits and ``bad``.
    ``first_parent`` walks candidates along first parents only (``git bisect --first-parent``);
    a good commit still excludes all of its ancestors, as in git.
    """

    parents: Parents
    good: set[str]
    bad: str
    first_parent: bool = False
    skipped: set[str] = field(default_factory=set)
    verdicts: dict[str, Verdict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.good = set(self.good)
        self._excluded = ancestors(self.parents, self.good)
        self._order: list[str] | None = None
        self._weight: dict[str, int] | None = None

    def mark(self, commit: str, verdict: Verdict) -> None:
        """Record a verdict, as ``git bisect good|bad|skip <commit>`` does."""
        if verdict not in (Verdict.GOOD, Verdict.BAD, Verdict.SKIP):
            raise ValueError(f"verdict must be good, bad or skip, not {verdict!r}")
        verdict = Verdict(verdict)
        self.verdicts[commit] = verdict
        if verdict == "good":
            self.good.add(commit)
            self._excluded |= ancestors(self.parents, [commit])
        elif verdict == "bad":
            self.bad = commit  # git moves refs/bisect/bad to the newest bad mark
        else:
            self.skipped.add(commit)
        self._order = self._weight = None

    def _parents_in(self, c: str, cand: set[str]) -> list[str]:
        ps = self.parents.get(c, ())
        return [p for p in (ps[:1] if self.first_parent else ps) if p in cand]

    def _candidate_order(self) -> list[str]:
        """Candidates oldest-first (topological), memoised until the next mark."""
        if self._order is None:
            cand = ancestors(self.parents, [self.bad], self.first_parent) - self._excluded
            self._order = self._topo_oldest_first(cand)
        return self._order

    def _weights(self) -> tuple[list[str], dict[str, int]]:
        """Candidates and their weights. Like git, a commit with one candidate parent weighs
        one more than that parent (a non-candidate parent reaches no candidate); only merges
        pay for a walk over their ancestors."""
        order = self._candidate_order()
        if self._weight is None:
            cand, weight = set(order), dict[str, int]()
            for c in order:  # parents come first
                ps = self._parents_in(c, cand)
                if len(ps) <= 1:
                    weight[c] = 1 + (weight[ps[0]] if ps else 0)
                else:
                    seen, stack = {c}, list(ps)
                    while stack:
                        p = stack.pop()
                        if p not in seen:
                            seen.add(p)
                            stack.extend(self._parents_in(p, cand))
                    weight[c] = len(seen)
            self._weight = weight
        return order, self._weight

    def _topo_oldest_first(self, cand: set[str]) -> list[str]:
        order: list[str] = []
        done: set[str] = set()
        for root in sorted(cand):
            stack = [(root, False)]
            while stack:
                c, expanded = stack.pop()
                if c in done:
                    continue
                if expanded:
                    done.add(c)
                    order.append(c)
                    continue
                stack.append((c, True))
                ps = self.parents.get(c, ())
                stack.extend((p, False) for p in (ps[:1] if self.first_parent else ps)
                             if p in cand and p not in done)
        return order

    def candidates(self) -> list[str]:
        """Possible first bad commits, oldest first; the current bad commit is the last."""
        return list(self._candidate_order())

    def testable(self) -> list[str]:
        """Candidates that may still be probed: not skipped and not the current bad commit."""
        return [c for c in self.candidates() if c != self.bad and c not in self.skipped]

    @property
    def first_bad(self) -> str | None:
        """The first bad commit once it is known (only the bad commit is left), else None."""
        return self.bad if self.candidates() == [self.bad] else None

    @property
    def done(self) -> bool:
        """True when nothing is left to probe: found, or only skipped candidates remain."""
        return not self.testable()

    def next_probes(self, k: int = 1) -> list[str]:
        """Pick up to ``k`` commits that split the candidates into ``k + 1`` near-equal parts.

        Target weights are ``j * n / (k + 1)`` for ``j = 1..k``; each target takes the untested
        candidate whose weight is nearest (ties: the older one). For ``k == 1`` on a linear
        history the pick is exactly git's. Returns fewer than ``k`` when fewer are testable.
        """
        if k < 1:
            raise ValueError("k must be >= 1")
        order, weight = self._weights()
        n = len(order)
        pool = [c for c in order if c != self.bad and c not in self.skipped]
        if not pool:
            return []
        if k == 1 and not self.skipped:
            # git returns the first counted commit that is (approximately) halfway; commits of
            # weight 1 are counted before that check, so they never take this shortcut.
            for c in sorted(pool, key=lambda c: weight[c]):
                if weight[c] >= 2 and _git_halfway(weight[c], n):
                    return [c]
            best = max(min(weight[c], n - weight[c]) for c in pool)
            return [c for c in pool if min(weight[c], n - weight[c]) == best][-1:]
        picks: list[str] = []
        for j in range(1, k + 1):
            free = [c for c in pool if c not in picks]
            if not free:
                break
            target = j * n / (k + 1)
            picks.append(min(free, key=lambda c: (abs(weight[c] - target), weight[c])))
        return sorted(picks, key=lambda c: weight[c])


@dataclass
class SimulatedBisect:
    """Result of :func:`simulate`: the first bad commit (None if ambiguous), candidates, probes."""

    first_bad: str | None
    candidates: list[str]
    probes: list[str]
    rounds: int


def simulate(parents: Parents, good: Iterable[str], bad: str, oracle: Callable[[str], Verdict],
             k: int = 1, first_parent: bool = False) -> SimulatedBisect:
    """Run a whole bisection against ``oracle`` (commit -> verdict), ``k`` probes per round."""
    state = BisectState(parents, set(good), bad, first_parent)
    probes: list[str] = []
    rounds = 0
    while not state.done:
        batch = state.next_probes(k)
        rounds += 1
        verdicts = {c: oracle(c) for c in batch}
        probes += batch
        # A good verdict on the newest probe and a bad one on an older probe cannot both be
        # true for a monotone oracle; applying goods first keeps the state consistent anyway.
        for c in sorted(batch, key=lambda c: verdicts[c] != "good"):
            if c in state.candidates():
                state.mark(c, verdicts[c])
    return SimulatedBisect(state.first_bad, state.candidates(), probes, rounds)
