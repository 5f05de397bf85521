"""The arithmetic of the measured search: normal scores and a side's likelihood and predictive."""

import numpy as np

from rlbisect.bisect.measured_fit import GRID, normal_scores, side_loglik, side_predictive


def test_normal_scores_rank_and_share_ties():
    z = normal_scores(np.array([3.0, -1e9, 3.0, 7.0, -np.inf]))
    assert z[4] < z[1] < z[0] == z[2] < z[3]      # order kept, ties equal, -inf lowest
    assert abs(normal_scores(np.arange(6.0)).sum()) < 1e-9   # untied: symmetric around 0


def test_a_side_that_fits_its_runs_is_likelier_and_predicts_near_them():
    z = np.array([1.1, 0.9, 1.0, 1.2])
    tight = side_loglik(np.array([4.0]), np.array([z.sum()]), np.array([(z * z).sum()]))
    mixed = np.r_[z[:2], -z[2:]]
    loose = side_loglik(np.array([4.0]), np.array([mixed.sum()]), np.array([(mixed * mixed).sum()]))
    assert tight[0] > loose[0]
    assert side_loglik(np.zeros(1), np.zeros(1), np.zeros(1))[0] == 0.0   # no runs: no evidence
    pred = side_predictive(np.array([4.0, 0.0]), np.array([z.sum(), 0.0]), np.array([(z * z).sum(), 0.0]))
    assert np.allclose(pred.sum(axis=1), 1.0)
    assert abs(GRID[np.argmax(pred[0])] - 0.85) < 0.2 and abs(GRID[np.argmax(pred[1])]) < 0.05


def test_the_seed_spread_is_measured_between_runs_of_one_commit():
    from rlbisect.bisect.measured_fit import seed_spread
    rng = np.random.default_rng(0)
    pos = np.repeat(np.arange(2000), 2)
    values = rng.normal(size=4000) * 3.0 + pos * 100.0        # commits far apart: only repeats count
    assert abs(seed_spread(values, pos) - 3.0) < 0.2
    assert seed_spread(np.array([1.0, 2.0]), np.array([0, 1])) == 0.0    # no commit ran twice


def test_the_values_view_abstains_without_a_spread_and_ignores_crashes():
    from rlbisect.bisect.measured_fit import values_posterior
    prior = np.log(np.full(4, 0.25))
    assert values_posterior(np.array([1.0, 1.0, 0.0, 0.0]), np.array([0, 0, 3, 3]), prior) is None
    assert values_posterior(np.array([1.0, -np.inf, 0.0]), np.array([0, 0, 3]), prior) is None
    v = np.array([1.0, 1.2, 1.1, -5.0, -5.2, -5.1])
    p = values_posterior(v, np.array([0, 0, 1, 2, 3, 3]), prior)
    assert p is not None and int(np.argmax(p)) == 2 and p[2] > 0.9


def test_an_outlier_makes_the_values_view_less_sure_not_wrong():
    from rlbisect.bisect.measured_fit import values_posterior
    prior = np.log(np.full(4, 0.25))
    pos = np.array([0, 0, 1, 2, 3, 3])
    clean = values_posterior(np.array([1.0, 1.2, 1.1, -5.0, -5.2, -5.1]), pos, prior)
    wild = values_posterior(np.array([1.0, 1.2, 1.1, -5.0, -5.2, -5.1, 1e4]), np.r_[pos, 0], prior)
    assert clean is not None and wild is not None and wild[2] < clean[2]
