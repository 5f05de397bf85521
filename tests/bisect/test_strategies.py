"""The strategies alone, with no git and no process: hand-written verdicts in, marks and answers
out (as git's own ``find_bisection`` is unit-tested). A :class:`~rlbisect.bisect.search.BisectState`
stands in for git: it takes the marks and says what git would want next."""

from __future__ import annotations

import random
from typing import Callable

import pytest

from rlbisect.bisect.options import BisectOptions
from rlbisect.bisect.search import BisectState, linear_history
from rlbisect.bisect.posterior import Posterior
from rlbisect.bisect.strategies import GitChoice, GitState, KAry, Strategy, make_strategy
from rlbisect.errors import Status, Verdict

G, B = Verdict.GOOD, Verdict.BAD


def commits(n: int) -> list[str]:
    return [f"c{i}" for i in range(n + 1)]          # c0 is GOOD, c{n} is BAD


def git_state(git: BisectState) -> GitState:
    if git.first_bad is not None:
        return GitState("found", first_bad=git.first_bad, candidates=[git.first_bad])
    picks = git.next_probes(1)
    return GitState("next", commit=picks[0]) if picks else GitState("ambiguous", candidates=git.candidates())


def drive(strategy: Strategy, shas: list[str], oracle: Callable[[str], Verdict]):
    """The driver's loop, pure: -> (conclusion, rounds of probes)."""
    parents = linear_history(shas)
    strategy.start([(s, tuple(parents[s])) for s in shas], shas[0], shas[-1], False)
    git = BisectState(parents, {shas[0]}, shas[-1])
    rounds = []
    while picks := strategy.plan(git_state(git)):
        rounds.append(picks)
        for commit, verdict in strategy.observe([(c, oracle(c)) for c in picks]):
            git.mark(commit, verdict)
    for commit, verdict in strategy.final_marks():
        git.mark(commit, verdict)
    return strategy.conclude(git_state(git)), rounds


def first_bad_at(k: int) -> Callable[[str], Verdict]:
    return lambda c: B if int(c[1:]) >= k else G


@pytest.mark.parametrize("k", [1, 5, 31, 32])
def test_git_choice_finds_any_culprit_in_log2_probes_and_vouches_for_the_ends(k):
    end, rounds = drive(GitChoice(), commits(32), first_bad_at(k))
    assert (end.status, end.first_bad) == (Status.FOUND, f"c{k}")
    assert all(len(r) == 1 for r in rounds) and len(rounds) <= 5 + 1   # log2(32), plus an endpoint
    probed = {c for r in rounds for c in r}
    if k == 32:                    # every probe passed: the answer rests on BAD, so BAD is probed
        assert "c32" in probed
    if k == 1:                     # every probe failed: the answer rests on GOOD, so GOOD is probed
        assert "c0" in probed


def test_bad_that_passes_and_good_that_fails_end_without_a_culprit():
    end, _ = drive(GitChoice(), commits(8), lambda c: G)
    assert end.status is Status.BAD_PASSES and end.first_bad is None
    end, _ = drive(GitChoice(), commits(8), lambda c: B)
    assert end.status is Status.GOOD_FAILS and "as every probe did" in end.message


def test_confirm_endpoints_probes_both_first():
    _, rounds = drive(GitChoice(confirm_endpoints=True), commits(8), first_bad_at(3))
    assert rounds[0] == ["c0", "c8"]


def test_skips_next_to_the_culprit_leave_every_candidate():
    oracle = lambda c: Verdict.SKIP if c in ("c3", "c4") else first_bad_at(4)(c)
    end, _ = drive(GitChoice(), commits(8), oracle)
    assert end.status is Status.AMBIGUOUS and end.first_bad is None
    assert set(end.candidates) == {"c3", "c4", "c5"}      # git: "could be any of" these


@pytest.mark.parametrize("jobs", [2, 3])
def test_k_ary_probes_jobs_commits_per_round_in_log_base_jobs_plus_one_rounds(jobs):
    end, rounds = drive(KAry(jobs), commits(64), first_bad_at(37))
    assert (end.status, end.first_bad) == (Status.FOUND, "c37")
    assert all(len(r) <= jobs for r in rounds[:-1])
    assert len(rounds) <= {2: 4, 3: 3}[jobs] + 1          # ceil(log_(J+1) 64), plus an endpoint


def test_a_round_whose_verdicts_contradict_each_other_marks_what_git_accepts():
    """A flaky round (a later commit good, an earlier one bad): goods first, then bads; a mark that
    would leave the candidates is dropped and said so, never sent to git."""
    s = KAry(3)
    shas = commits(16)
    parents = linear_history(shas)
    s.start([(c, tuple(parents[c])) for c in shas], "c0", "c16", False)
    marks = s.observe([("c4", B), ("c12", G), ("c8", B)])
    assert marks == [("c12", G)]                  # good first: c4 and c8 are then no candidates
    assert sorted(s.dropped) == ["c4", "c8"]
    marks = s.observe([("c14", B), ("c15", B), ("c13", G)])
    assert marks == [("c13", G), ("c15", B), ("c14", B)] and s.dropped == []   # bads newest first


def test_the_posterior_finds_a_flaky_culprit_and_says_nothing_changed_when_nothing_did():
    rng = random.Random(3)
    flaky = lambda c: B if rng.random() < (0.9 if int(c[1:]) >= 20 else 0.1) else G
    end, rounds = drive(Posterior(0.95), commits(32), flaky)
    assert (end.status, end.first_bad) == (Status.FOUND, "c20")
    assert all(len(r) == 1 for r in rounds)
    end, _ = drive(Posterior(0.95), commits(32), lambda c: B if rng.random() < 0.3 else G)
    assert end.status in (Status.BAD_PASSES, Status.GOOD_FAILS, Status.UNSURE)
    assert end.first_bad is None


@pytest.mark.parametrize("confidence,said", [(0.95, "posterior 0.9812, the stop 0.975 for --confidence 0.95"),
                                              (0.999999, "posterior 0.9999996, the stop 0.9999995 for "
                                                         "--confidence 0.999999")])
def test_the_stop_is_printed_to_the_digits_it_has(confidence, said):
    """At six nines the stop was printed "1" beside a posterior of "1": a culprit named at certainty."""
    s = Posterior(confidence)
    s.start([(c, ()) for c in commits(2)], "c0", "c2", False)
    assert s.stop_reached(0.98123 if confidence == 0.95 else 0.99999963, "c1") == said


def test_the_options_choose_the_strategy():
    assert isinstance(make_strategy(BisectOptions()), GitChoice)
    assert isinstance(make_strategy(BisectOptions(jobs=4)), KAry)
    assert isinstance(make_strategy(BisectOptions(flaky=True)), Posterior)
    assert not make_strategy(BisectOptions(flaky=True)).recall


def test_a_smallest_move_needs_a_measured_one_way_search():
    from pydantic import ValidationError

    from rlbisect.bisect.posterior import MeasuredPosterior
    from rlbisect.errors import InputError
    with pytest.raises(ValidationError, match="--min-effect needs --flaky"):
        BisectOptions(min_effect=0.5)
    with pytest.raises(InputError, match="--min-effect needs a predicate that measures"):
        make_strategy(BisectOptions(flaky=True, min_effect=0.5))
    with pytest.raises(InputError, match="give --direction lower or higher"):
        MeasuredPosterior(("reward", "change"), min_effect=0.5)

    class Measures:
        measures = ("reward", "lower")
    chosen = make_strategy(BisectOptions(flaky=True, min_effect=0.5), Measures())
    assert isinstance(chosen, MeasuredPosterior) and chosen.min_effect == 0.5
