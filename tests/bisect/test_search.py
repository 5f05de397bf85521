"""search.py: candidates and next probes on hand-written histories and verdict lists."""

from __future__ import annotations

import math
import random

import pytest

from rlbisect.bisect.search import BisectState, ancestors, linear_history, simulate


def line(n: int) -> tuple[list[str], dict]:
    """GOOD = c0, then c1..cn; cn is BAD. n candidates."""
    commits = [f"c{i}" for i in range(n + 1)]
    return commits, linear_history(commits)


def test_candidates_and_marks_on_a_hand_written_verdict_list():
    commits, parents = line(8)
    s = BisectState(parents, {"c0"}, "c8")
    assert s.candidates() == commits[1:]
    assert s.next_probes() == ["c4"]
    s.mark("c4", "good")
    assert s.candidates() == ["c5", "c6", "c7", "c8"] and s.next_probes() == ["c6"]
    s.mark("c6", "bad")
    assert s.bad == "c6" and s.candidates() == ["c5", "c6"] and s.next_probes() == ["c5"]
    s.mark("c5", "bad")
    assert s.done and s.first_bad == "c5" and s.candidates() == ["c5"]


def test_only_skipped_left_lists_every_candidate_including_bad():
    commits, parents = line(5)
    s = BisectState(parents, {"c0"}, "c5")
    for c, v in [("c2", "skip"), ("c3", "skip"), ("c1", "good"), ("c4", "skip")]:
        s.mark(c, v)
    assert s.done and s.first_bad is None
    assert s.candidates() == ["c2", "c3", "c4", "c5"]
    assert s.next_probes() == []


@pytest.mark.parametrize("n,expected", [(2, 1), (3, 2), (4, 2), (5, 2), (6, 3), (7, 3), (8, 4),
                                        (9, 4), (10, 5), (11, 5)])
def test_first_pick_matches_git_on_linear_history(n, expected):
    # Measured with git 2.39: `git bisect start BAD GOOD` on a line of n candidates picks the
    # expected-th commit above GOOD (git skips weight-1 commits in its halfway shortcut).
    commits, parents = line(n)
    assert BisectState(parents, {"c0"}, f"c{n}").next_probes() == [f"c{expected}"]


@pytest.mark.parametrize("n", range(1, 34))
def test_exhaustive_linear_finds_every_position_in_ceil_log2_probes(n):
    commits, parents = line(n)
    for first in range(1, n + 1):
        out = simulate(parents, ["c0"], f"c{n}",
                       lambda c: "bad" if int(c[1:]) >= first else "good")
        assert out.first_bad == f"c{first}"
        assert len(out.probes) <= math.ceil(math.log2(n)) if n > 1 else not out.probes


@pytest.mark.parametrize("k", [2, 3, 4])
def test_k_ary_rounds_are_ceil_log_k_plus_1(k):
    for n in range(1, 50):
        commits, parents = line(n)
        bound = 0 if n == 1 else math.ceil(math.log(n, k + 1) - 1e-9)
        for first in range(1, n + 1):
            out = simulate(parents, ["c0"], f"c{n}",
                           lambda c: "bad" if int(c[1:]) >= first else "good", k=k)
            assert out.first_bad == f"c{first}"
            assert out.rounds <= bound, (n, first, out.rounds)


def test_k_probes_split_into_near_equal_parts():
    commits, parents = line(12)
    picks = BisectState(parents, {"c0"}, "c12").next_probes(3)
    assert picks == ["c3", "c6", "c9"]


def test_exhaustive_with_skips_never_loses_the_first_bad_commit():
    rng = random.Random(6030)
    for _ in range(300):
        n = rng.randint(2, 20)
        commits, parents = line(n)
        first = rng.randint(1, n)
        skips = {f"c{i}" for i in range(1, n) if rng.random() < 0.3}
        out = simulate(parents, ["c0"], f"c{n}", lambda c: "skip" if c in skips
                       else ("bad" if int(c[1:]) >= first else "good"))
        assert f"c{first}" in out.candidates
        if out.first_bad is not None:
            assert out.first_bad == f"c{first}"
        else:  # ambiguous only because skipped commits sit next to the answer
            assert set(out.candidates) - {out.candidates[-1]} <= skips


def random_dag(rng: random.Random, n: int) -> dict[str, tuple[str, ...]]:
    parents: dict[str, tuple[str, ...]] = {"c0": ()}
    heads = ["c0"]
    for i in range(1, n):
        first = rng.choice(heads)
        ps = [first]
        others = [h for h in heads if h != first]
        if others and rng.random() < 0.3:
            ps.append(rng.choice(others))
            heads.remove(ps[1])
        if rng.random() < 0.25:
            heads.append(f"c{i}")  # keep `first` alive as a branch
        else:
            heads.remove(first)
            heads.append(f"c{i}")
        parents[f"c{i}"] = tuple(ps)
    tip = f"c{n}"
    parents[tip] = tuple(heads)
    return parents


def test_dag_with_merges_finds_the_commit_that_introduced_the_fault():
    rng = random.Random(1)
    for _ in range(200):
        n = rng.randint(3, 25)
        parents = random_dag(rng, n)
        culprit = rng.choice([c for c in parents if c != "c0"])
        bad_set = {c for c in parents if culprit in ancestors(parents, [c])}
        out = simulate(parents, ["c0"], f"c{n}", lambda c: "bad" if c in bad_set else "good")
        assert out.first_bad == culprit
        # Each probe at least roughly halves the candidates: generous log bound on merges.
        assert len(out.probes) <= 2 * math.ceil(math.log2(n + 1)) + 1


def test_first_parent_walks_only_the_mainline():
    # c0 - c1 - c3(merge of c2) - c4 ; c2 branches off c0
    parents = {"c0": (), "c1": ("c0",), "c2": ("c0",), "c3": ("c1", "c2"), "c4": ("c3",)}
    s = BisectState(parents, {"c0"}, "c4", first_parent=True)
    assert s.candidates() == ["c1", "c3", "c4"]
    assert "c2" in BisectState(parents, {"c0"}, "c4").candidates()


def test_invalid_arguments_are_rejected():
    commits, parents = line(3)
    s = BisectState(parents, {"c0"}, "c3")
    with pytest.raises(ValueError):
        s.mark("c1", "maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        s.next_probes(0)
