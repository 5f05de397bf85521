"""The measured search (rlbisect.bisect.measured): it names the culprit from numbers, pooled
across commits, and refuses to when the numbers do not support one culprit."""

import numpy as np
import pytest

from rlbisect.bisect.measured import MeasuredSearch


def search(n, culprit, draw, direction="lower", budget=400, seed=0, jobs=1, min_effect=None):
    """Drive a search against ``draw(rng, bad) -> value`` -> (decision, runs)."""
    rng = np.random.default_rng(seed)
    s, runs = MeasuredSearch(n, direction, min_effect=min_effect), 0
    while (d := s.decide(0.95, budget, runs)).status == "probe":
        for p in ([d.probe] if jobs == 1 else s.propose(jobs)):
            s.observe(p, draw(rng, p >= culprit))
            runs += 1
    return d, runs, s


@pytest.mark.parametrize("culprit", [1, 17, 32])
def test_a_shift_of_two_spreads_is_found_in_few_runs(culprit):
    d, runs, _ = search(32, culprit, lambda r, bad: r.normal() - (2.0 if bad else 0.0), seed=culprit)
    assert d.status == "found" and d.first_bad == culprit and runs < 150


def test_heavy_tails_and_outliers_do_not_mislead():
    def draw(r, bad):
        x = r.standard_t(2) + (1e6 if r.random() < 0.05 else 0.0)   # 5% wild outliers
        return x - (3.0 if bad else 0.0)
    d, _, _ = search(16, 9, draw, seed=3)
    assert d.status == "found" and d.first_bad == 9


def test_a_change_of_spread_alone_is_found_when_any_change_counts():
    d, _, s = search(16, 6, lambda r, bad: r.normal() * (3.0 if bad else 1.0), direction="change", seed=1)
    assert d.status == "found" and d.first_bad == 6
    sides = s.sides(6)
    assert sides["before"]["runs"] > 2 and sides["after"]["runs"] > 2


def test_a_rise_is_not_a_regression_when_lower_was_asked():
    d, _, _ = search(16, 5, lambda r, bad: r.normal() + (3.0 if bad else 0.0), seed=2)
    assert d.status == "no_regression" and d.first_bad == 5 and "rose" in d.message


def test_crashes_count_as_the_worst_outcome():
    d, _, _ = search(16, 11, lambda r, bad: float("nan") if bad else r.normal(), seed=4)
    assert d.status == "found" and d.first_bad == 11


def test_nothing_changed_names_no_culprit():
    for seed in range(5):
        d, runs, _ = search(16, 99, lambda r, bad: r.normal(), budget=150, seed=seed)
        assert d.status in ("unknown", "no_regression") and runs <= 150


def test_two_changes_are_a_misfit_not_a_culprit():
    """Runs everywhere on a band (5..10 lower) and a later drop (14 on): no single culprit."""
    rng = np.random.default_rng(5)
    s = MeasuredSearch(16, "lower")
    for p in range(17):
        for _ in range(6):
            s.observe(p, rng.normal() - (4.0 if 5 <= p <= 10 else 0.0) - (8.0 if p >= 14 else 0.0))
    d = s.decide(0.95, 400)
    assert d.status == "misfit" and "change again" in d.message
    clean = MeasuredSearch(16, "lower")   # the same runs with one drop: named
    for p in range(17):
        for _ in range(6):
            clean.observe(p, rng.normal() - (8.0 if p >= 14 else 0.0))
    assert clean.decide(0.95, 400).first_bad == 14


def test_skipped_commits_glue_their_culprits():
    s = MeasuredSearch(8, "lower")
    rng = np.random.default_rng(0)
    s.observe(4, None)   # commit 4 cannot be run: once can be the machine, twice bars it
    assert 4 not in s.skipped
    s.observe(4, None)
    runs = 0
    while (d := s.decide(0.95, 400, runs)).status == "probe":
        assert d.probe != 4
        s.observe(d.probe, rng.normal() - (3.0 if d.probe >= 5 else 0.0))
        runs += 1
    assert d.status == "skipped" and set(d.candidates) == {4, 5}


def test_a_round_of_jobs_starts_with_the_sequential_pick():
    _, _, s = search(32, 20, lambda r, bad: r.normal() - (1.0 if bad else 0.0), budget=12, seed=6)
    assert s.propose(4)[0] == s.next_probe() and len(s.propose(4)) == 4
    assert (s.information_gain() >= 0).all()


def test_jobs_take_fewer_rounds_and_find_the_same():
    d1, runs1, _ = search(32, 13, lambda r, bad: r.normal() - (2.0 if bad else 0.0), seed=8)
    rng = np.random.default_rng(8)
    s, runs, rounds = MeasuredSearch(32, "lower"), 0, 0
    while (d := s.decide(0.95, 400, runs)).status == "probe":
        rounds += 1
        for p in s.propose(4):
            s.observe(p, rng.normal() - (2.0 if p >= 13 else 0.0))
            runs += 1
    assert d1.first_bad == d.first_bad == 13 and rounds <= 0.45 * runs1


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        MeasuredSearch(0)
    with pytest.raises(ValueError):
        MeasuredSearch(4, "up")
    with pytest.raises(ValueError):
        MeasuredSearch(4).observe(5, 1.0)


@pytest.mark.parametrize("seed", range(5))
def test_a_smallest_move_worth_naming_ends_a_flat_range_early(seed):
    flat = lambda r, bad: r.normal()   # noqa: E731
    d, runs, s = search(64, 65, flat, budget=420, seed=seed, min_effect=0.5)
    assert d.status == "no_regression" and "no drop of 0.5 seed spreads" in d.message
    assert 16 / 0.25 <= runs < 250 and s.negligible() >= 0.975
    d, runs, _ = search(64, 65, flat, budget=420, seed=seed)      # without it: the budget, no answer
    assert d.status == "unknown" and runs == 420


@pytest.mark.parametrize("seed", range(5))
def test_a_move_twice_the_smallest_is_answered_as_without_it(seed):
    def drop(r, bad):
        return r.normal() - (1.0 if bad else 0.0)
    d, runs, s = search(64, 20 + seed, drop, budget=420, seed=seed, min_effect=0.5)
    assert d.status == "found" and s.negligible() < 0.5
    assert (d, runs) == search(64, 20 + seed, drop, budget=420, seed=seed)[:2]


def test_the_smallest_move_is_one_way():
    with pytest.raises(ValueError, match="min_effect needs direction lower or higher"):
        MeasuredSearch(8, "change", min_effect=0.5)
    with pytest.raises(ValueError, match="min_effect"):
        MeasuredSearch(8, "lower", min_effect=0.0)


def _large_moves(values_stop: float, monkeypatch) -> list[tuple[bool, int, str]]:
    from rlbisect.bisect import measured
    monkeypatch.setattr(measured, "VALUES_STOP", values_stop)
    out = []
    for seed in range(12):
        culprit = 1 + seed * 5 % 31
        d, runs, _ = search(31, culprit, lambda r, bad: r.normal() - (6.0 if bad else 0.0), seed=seed)
        out.append((d.status == "found" and d.first_bad == culprit, runs, d.message))
    return out


def test_a_large_move_is_named_on_the_values_in_fewer_runs_than_ranks_need(monkeypatch):
    """Ranks cannot see how far apart the sides are: six seed spreads look like one in rank. The
    values' view names the same culprits in fewer runs (off: a threshold never reached)."""
    ranks_only = _large_moves(1.1, monkeypatch)
    both = _large_moves(0.999, monkeypatch)
    assert all(ok for ok, _, _ in ranks_only) and all(ok for ok, _, _ in both)
    assert sum(r for _, r, _ in both) < 0.85 * sum(r for _, r, _ in ranks_only)
    assert any("on the runs' values" in m for _, _, m in both)
    assert not any(m for _, _, m in ranks_only)


def test_the_values_name_no_culprit_their_ranks_do_not_lead_to(monkeypatch):
    """Where the values named a culprit, a values' posterior as sure of another commit is no answer."""
    from rlbisect.bisect import measured
    d, _, s = search(31, 12, lambda r, bad: r.normal() - (6.0 if bad else 0.0), seed=4)
    ranks = s.culprit_posterior()
    assert d.status == "found" and d.first_bad == 12 and "values" in d.message
    assert measured.RANKS_AGREE <= ranks[12] < 0.975
    elsewhere = np.zeros(32)
    elsewhere[11] = 1.0
    monkeypatch.setattr(measured, "values_posterior", lambda *a: elsewhere)
    assert s.decide(0.95).status == "probe"


def test_a_short_range_where_nothing_changed_is_not_answered_by_the_prior():
    """One commit, the same distribution on both sides: NONE at 0.04 named the commit in about one
    search in seven; as likely as the commit now, in at most one in fifty."""
    rng = np.random.default_rng(3)
    named = 0
    for _ in range(60):
        s, runs = MeasuredSearch(1, "lower"), 0
        while (d := s.decide(0.95, 120, runs)).status == "probe":
            s.observe(d.probe, float(rng.standard_normal()))
            runs += 1
        named += d.status == "found"
    assert named <= 1
