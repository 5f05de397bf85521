"""Healthy code passes every check, old and new, wherever training may run: 20 probe seeds, both
loss modes, temperature 1 and 0.7, with and without KL (benchmarks/bench_check_false_alarms.py
prints the same as a table)."""

import itertools

import pytest

from reference_trainer.adapter import make_adapter
from rlbisect.check.invariants import sanity_checks

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("loss_mode,temperature,kl_coef",
                         list(itertools.product(("token_mean", "seq_mean_token_mean"), (1.0, 0.7), (0.0, 0.1))))
def test_no_false_alarm_on_20_probe_seeds(loss_mode, temperature, kl_coef):
    alarms = []
    for seed in range(1, 21):
        res = sanity_checks(make_adapter(seed=seed, kl_coef=kl_coef, temperature=temperature, loss_mode=loss_mode))
        alarms += [(seed, name, r.value) for name, r in res.items() if r.failed]
        assert not any(r.na for name, r in res.items() if "clip" in name)   # the new checks did run
    assert alarms == []
