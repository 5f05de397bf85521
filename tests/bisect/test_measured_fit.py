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
