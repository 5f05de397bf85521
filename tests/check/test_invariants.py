"""Each check fails on the fault it targets and passes without it (on the reference trainer);
tests/test_generality.py shows the same on an independently written trainer."""

import math

import pytest
import torch

from reference_trainer.adapter import make_adapter
from reference_trainer.faults import BUGS
from rlbisect.check.invariants import (BUILTIN, INVARIANTS, Thresholds, as_json, check_matrix, register_invariant,
                                 sanity_checks)

CHAPTER = {None: [], "mask_shift": [1, 2, 5], "stale_old_logp": [7], "entropy_sign": [], "sign_flip": [8],
           "accum_local": [6], "sampler_temp": [2, 3], "ref_is_policy": [9]}


@pytest.fixture(scope="module")
def matrix():
    return check_matrix(lambda bug: make_adapter(bug=bug))


def failing(results):
    return [i + 1 for i, r in enumerate(results.values()) if not r.passed]


def test_names_and_order_are_the_chapters():
    assert BUILTIN == ["mask = policy tokens", "sampler = trainer log-prob", "ratio = 1 before any step",
                       "group advantage mean = 0", "loss invariant to padding", "accumulated = one-pass gradient",
                       "old_logp frozen in the update", "update raises log pi where A > 0",
                       "KL to reference > 0 after a step"]


@pytest.mark.parametrize("bug", [None, *BUGS])
def test_each_fault_fails_exactly_the_chapters_checks(matrix, bug):
    assert failing(matrix[bug or "none"]) == CHAPTER[bug]


def test_healthy_values_are_within_the_chapters_margins(matrix):
    v = {name: r.value for name, r in matrix["none"].items()}
    assert v["mask = policy tokens"] == 0 and v["ratio = 1 before any step"] == 0
    assert v["sampler = trainer log-prob"] < 1e-5 and v["group advantage mean = 0"] < 1e-6
    assert v["loss invariant to padding"] < 1e-6 and v["accumulated = one-pass gradient"] == 0
    assert v["old_logp frozen in the update"] > 0 and v["update raises log pi where A > 0"] > 0.2
    assert v["KL to reference > 0 after a step"] > 0


def test_without_a_reference_the_kl_check_has_nothing_to_check():
    r = sanity_checks(make_adapter(kl_coef=0.0))["KL to reference > 0 after a step"]
    assert r.passed and r.value == 0.0


def test_thresholds_decide_the_verdict():
    strict = sanity_checks(make_adapter(), Thresholds(logp_gap=1e-9))
    assert not strict["sampler = trainer log-prob"].passed
    loose = sanity_checks(make_adapter(bug="sampler_temp"), Thresholds.bf16())
    assert loose["ratio = 1 before any step"].value > Thresholds().ratio          # still measured
    assert Thresholds.bf16().logp_gap > Thresholds().logp_gap


def test_registered_invariant_runs_with_the_nine_and_can_fail():
    name = "test: no advantage is NaN"
    calls = []

    @register_invariant(name)
    def _(ctx):
        calls.append(1)
        bad = int(torch.isnan(ctx.prep.advantages).sum())
        return float(bad), bad == 0
    try:
        results = sanity_checks(make_adapter())
        assert list(results)[-1] == name and results[name].passed and calls
        with pytest.raises(ValueError, match="already registered"):
            register_invariant(name)(lambda ctx: (0.0, True))
    finally:
        INVARIANTS.pop(name)


def test_no_reward_variance_fails_the_direction_check_instead_of_passing_silently():
    class AllFail:
        def __init__(self):
            self._a = make_adapter()

        def probe_batch(self):
            batch, truth = self._a.probe_batch()
            truth.rewards = torch.zeros_like(truth.rewards)
            return batch, truth

        def __getattr__(self, name):
            return getattr(self._a, name)
    r = sanity_checks(AllFail())["update raises log pi where A > 0"]
    assert math.isnan(r.value) and not r.passed


def test_as_json_shape():
    out = as_json(sanity_checks(make_adapter()))
    assert set(out) == set(BUILTIN) and all(set(v) == {"value", "passed"} for v in out.values())
