"""Check 24: the learning rate the trainer's own optimizer and scheduler set, at every probed setting."""

import pytest

from reference_trainer.adapter import make_adapter
from rlbisect.check.invariants import sanity_checks
from rlbisect.check.spec import Schedule, lr_factor

SCHEDULE = "scheduler sets the declared learning rates"


def test_healthy_sets_the_declared_schedule_at_every_probed_setting():
    adapter = make_adapter()
    assert {"lr_schedule": "cosine", "warmup_steps": 3} in adapter.probe_variants.values()
    cosine = adapter.with_settings(lr_schedule="cosine", warmup_steps=3).lr_schedule(20)
    want = Schedule(kind="cosine", warmup=3, total=20)
    assert cosine == pytest.approx([6e-4 * lr_factor(want, n) for n in range(20)], rel=1e-6)
    res = sanity_checks(adapter, only=[SCHEDULE])[SCHEDULE]
    assert res.passed and not res.na and res.value < 1e-9


def test_a_cosine_of_a_full_cycle_fails_at_the_cosine_setting(monkeypatch):
    """The cosine decay over a whole cycle (back up to the full rate by the end of the run) passed
    every check, the run-level ones too: run B decays linearly, run A is constant."""
    import reference_trainer.update as update
    from tests.helpers import edit_source
    edit_source(monkeypatch, update.lr_lambda, "math.cos(math.pi * done)", "math.cos(2 * math.pi * done)")
    res = sanity_checks(make_adapter())
    assert [n for n, r in res.items() if r.failed] == [SCHEDULE]
    assert res[SCHEDULE].setting == "cosine schedule, 3 warmup steps" and res[SCHEDULE].value > 0.5


@pytest.mark.parametrize("bug,setting", [("warmup_zero_first", "cosine schedule, 3 warmup steps"),
                                         ("optimizer_lr_ignored", "")])
def test_catalogue_schedule_faults_fail_without_a_run(bug, setting):
    res = sanity_checks(make_adapter(bug=bug), only=[SCHEDULE])[SCHEDULE]
    assert res.failed and res.setting == setting


def test_na_without_a_schedule_probe():
    adapter = make_adapter()
    adapter.lr_schedule = None
    res = sanity_checks(adapter, only=[SCHEDULE])[SCHEDULE]
    assert res.passed is None and "lr_schedule" in res.na
