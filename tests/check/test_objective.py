"""Checks 17-20 fail on the faults they target and pass without them; n/a says why."""

import pytest

from reference_trainer.adapter import make_adapter
from rlbisect.check.invariants import sanity_checks

CAUGHT = {
    "each group holds one task": ["group_tiled"],
    "advantages = the declared estimator": ["adv_batch_std", "adv_wrong_axis", "rewards_misaligned", "sign_flip"],
    "loss = the declared objective": ["kl_k3_reversed", "kl_unmasked", "kl_detached", "kl_sign", "entropy_sign",
                                      "entropy_untempered", "entropy_unmasked", "clip_min_before_advantage",
                                      "clip_max", "clip_low_eps", "ratio_inverted", "seq_mean_padded",
                                      "logp_no_temp"],
    "reference log-probs = the reference's": ["ref_untempered"],
}
# found at a declared variant, not as configured: the check names the setting
AT_VARIANT = {"entropy_untempered": "temperature 0.7, entropy bonus", "logp_no_temp": "temperature 0.7, entropy bonus",
              "seq_mean_padded": "per-episode mean, 3 microbatches", "ref_untempered": "temperature 0.7, entropy bonus",
              "entropy_unmasked": "temperature 0.7, entropy bonus"}


@pytest.fixture(scope="module")
def checked():
    cache = {}

    def get(bug=None):
        if bug not in cache:
            cache[bug] = sanity_checks(make_adapter(seed=2, bug=bug))
        return cache[bug]
    return get


@pytest.mark.parametrize("check,bug", [(c, b) for c, bugs in CAUGHT.items() for b in bugs])
def test_each_check_fails_on_its_faults_and_passes_without(checked, check, bug):
    healthy, faulty = checked()[check], checked(bug)[check]
    assert healthy.passed and not healthy.na and healthy.value < 1e-4
    assert not faulty.passed, faulty
    assert faulty.setting == AT_VARIANT.get(bug, "")


def test_the_objective_is_checked_with_the_ratio_past_both_clip_bounds(checked):
    """clip_min_before_advantage only differs outside [1 - eps, 1 + eps] with A < 0."""
    value = checked("clip_min_before_advantage")["loss = the declared objective"].value
    assert value > 1e-2


def test_na_where_the_adapter_declares_or_shows_too_little():
    adapter = make_adapter()
    adapter.__class__ = type("KindOnly", (type(adapter),), {"objective": "ppo-clip"})   # its kind only
    res = sanity_checks(adapter)
    for name in ("advantages = the declared estimator", "loss = the declared objective",
                 "reference log-probs = the reference's"):
        assert res[name].passed is None and "declares its objective only as 'ppo-clip'" in res[name].na
    # an adapter that says why (TRL's use_bias_correction_kl): the reason is what the user reads
    adapter.objective_why = "use_bias_correction_kl (the KL term times the importance ratio)"
    res = sanity_checks(adapter, only=["loss = the declared objective"])
    assert res["loss = the declared objective"].na.endswith("only as 'ppo-clip': use_bias_correction_kl "
                                                             "(the KL term times the importance ratio)")
    adapter = make_adapter()
    loss = adapter.loss
    adapter.loss = lambda model, batch, rows, prep, ref=None: loss(model, batch, rows, prep, ref)   # no tap
    probe = adapter.probe_batch

    def without_tasks():
        batch, truth = probe()
        truth.tasks = None
        return batch, truth
    adapter.probe_batch = without_tasks
    res = sanity_checks(adapter)
    assert "takes no `tap`" in res["loss = the declared objective"].na
    assert "no `tasks`" in res["each group holds one task"].na
    assert res["advantages = the declared estimator"].passed and not res["advantages = the declared estimator"].na


def test_without_a_kl_term_anywhere_the_reference_check_says_so():
    adapter = make_adapter(kl_coef=0.0)
    adapter.variants = {"per-episode mean": {"loss_mode": "seq_mean_token_mean"}}
    res = sanity_checks(adapter)["reference log-probs = the reference's"]
    assert res.passed is None and res.na.startswith("no KL term at any setting")


def test_a_nan_gradient_of_a_right_loss_value_fails_check_19():
    """0 * sqrt(0) on the logits: the value is right, the gradient NaN. max(value, NaN) kept the
    value and passed."""
    import math

    import torch
    from reference_trainer.adapter import ReferenceAdapter

    class NanGrad(ReferenceAdapter):
        def loss(self, model, batch, rows, prep, ref=None, tap=None):
            box = {}

            def poisoned(event, **kw):
                if event == "loss" and kw.get("logits") is not None:
                    kw["loss"] = box["loss"] = kw["loss"] + 0.0 * torch.sqrt(kw["logits"] - kw["logits"].detach()).sum()
                if tap is not None:
                    tap(event, **kw)
            loss, stats = super().loss(model, batch, rows, prep, ref=ref, tap=poisoned)
            return box.get("loss", loss), stats
    r = sanity_checks(NanGrad(), only=["loss = the declared objective"])["loss = the declared objective"]
    assert r.failed and math.isnan(r.value)
