"""What the TRL adapter declares: the objective per loss type (checks 18-20 compare TRL's loss and
its stored reference log-probs with it), the settings that change the objective on purpose, and the
variants the step-0 checks exercise by default."""

from __future__ import annotations

import contextlib
import io
import warnings

import pytest

pytest.importorskip("trl")

from rlbisect.check.invariants import sanity_checks  # noqa: E402
from rlbisect.check.spec import Objective  # noqa: E402


def _quiet():
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    return stack


def _demo(**opts):
    from rlbisect.frameworks.trl.adapter import demo
    with _quiet():
        return demo(**opts)


def _checks(**opts):
    adapter = _demo(**opts)
    with _quiet():
        return sanity_checks(adapter)


def _trl_edited(monkeypatch, old: str, new: str) -> None:
    """GRPOTrainer with one line of TRL's own source changed (a fault written into TRL, as a
    regression would be), for every trainer the demo builds while ``monkeypatch`` holds."""
    import importlib.util
    import pathlib
    import sys

    import trl
    import trl.trainer.grpo_trainer as original
    source = pathlib.Path(original.__file__).read_text()
    assert source.count(old) == 1, old
    spec = importlib.util.spec_from_loader("trl.trainer._edited_grpo_trainer", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__, module.__file__ = "trl.trainer", original.__file__
    monkeypatch.setitem(sys.modules, spec.name, module)
    exec(compile(source.replace(old, new), original.__file__, "exec"), module.__dict__)
    monkeypatch.setattr(trl, "GRPOTrainer", module.GRPOTrainer)


@pytest.mark.slow
@pytest.mark.parametrize("loss_type,opts,old,new", [
    ("cispo", {"epsilon_high": 5.0}, "clamped_ratios = torch.clamp(coef_1, max=self.epsilon_high).detach()",
     "clamped_ratios = torch.clamp(coef_1, max=self.epsilon_high)"),
    ("sapo", {}, "torch.where(advantages > 0, self.args.sapo_temperature_pos, self.args.sapo_temperature_neg)",
     "torch.where(advantages > 0, self.args.sapo_temperature_neg, self.args.sapo_temperature_pos)"),
])
def test_cispo_and_sapo_are_stated_and_a_fault_in_trls_source_fails_check_19(monkeypatch, loss_type, opts, old, new):
    """CISPO's importance weight must be detached and SAPO's two temperatures go by the advantage's
    sign; both objectives were left as kinds, so either fault passed every check."""
    name = "loss = the declared objective"
    a = _demo(loss_type=loss_type, **opts)
    assert a.objective.kind == loss_type and a.objective_why == ""
    assert _checks(loss_type=loss_type, **opts)[name].passed
    _trl_edited(monkeypatch, old, new)
    faulty = _checks(loss_type=loss_type, **opts)
    assert faulty[name].failed and faulty[name].value > 0.1
    if loss_type == "sapo":                            # through the variant that plays it
        at_default = _checks()[name]
        assert at_default.failed and at_default.setting.startswith(loss_type)
    else:                                              # through run B, which plays it
        from rlbisect.check.run_level import run_checks
        with _quiet():
            at_default = run_checks(_demo())[name + ", every minibatch"]
        assert at_default.failed and "loss_type=cispo" in at_default.setting


@pytest.mark.slow
@pytest.mark.parametrize("old,new", [
    ("entropy_mask = masked_entropies >= entropy_threshold", "entropy_mask = masked_entropies <= entropy_threshold"),
    ("self.get_high_entropy_mask(entropies, mask, 1 - self.top_entropy_quantile)",
     "self.get_high_entropy_mask(entropies, mask, self.top_entropy_quantile)")])
def test_the_entropy_quantile_is_stated_and_a_fault_in_trls_mask_fails_at_the_default(monkeypatch, old, new):
    """top_entropy_quantile trains only the high-entropy tokens; it was left as a kind, so a mask that
    kept the low-entropy tokens instead, or a quantile taken at q rather than 1 - q, passed every check."""
    name = "loss = the declared objective"
    a = _demo(top_entropy_quantile=0.8)
    assert a.objective.top_entropy_quantile == 0.8 and a.objective_why == ""
    assert _checks(top_entropy_quantile=0.8)[name].passed and _checks()[name].passed
    _trl_edited(monkeypatch, old, new)
    assert _checks(top_entropy_quantile=0.8)[name].failed
    at_default = _checks()[name]
    assert at_default.failed and "top 80% entropy tokens" in at_default.setting and at_default.value > 0.01


@pytest.mark.slow
@pytest.mark.parametrize("loss_type,aggregation", [("grpo", "seq_mean_token_mean"), ("bnpo", "token_mean"),
                                                   ("dapo", "token_mean"), ("dr_grpo", "seq_mean_token_sum")])
def test_the_objective_is_read_from_the_configuration(loss_type, aggregation):
    a = _demo(loss_type=loss_type, kl_coef=0.05, temperature=0.9, epsilon=0.3, epsilon_high=0.28,
              scale_rewards="none")
    length = float(a.trainer.args.max_completion_length) if loss_type == "dr_grpo" else 1.0
    assert a.objective == Objective(kind="ppo-clip", clip_low=0.3, clip_high=0.28, aggregation=aggregation,
                                    kl_coef=0.05, kl_estimator="k3", temperature=0.9, advantages="group_mean",
                                    adv_eps=1e-4, entropy_aggregation="token_mean", sum_norm=length)
    assert a.objective_why == ""


@pytest.mark.slow
@pytest.mark.parametrize("old,new", [
    ("k_pos=self.args.vespo_k_pos,", "k_pos=self.args.vespo_k_neg,"),
    ("@torch.no_grad()\n    def get_gamma_weights(", "def get_gamma_weights(")])
def test_vespo_is_stated_and_a_fault_in_its_gamma_weight_fails_check_19(monkeypatch, old, new):
    """VESPO weighs each sequence by a gamma function of its ratio, detached; it was left as a kind,
    so a weight with the wrong shape parameter, or one left on the graph, passed every check."""
    name = "loss = the declared objective"
    a = _demo(loss_type="vespo")
    assert a.objective.kind == "vespo" and a.objective_why == "" and a.objective.vespo_neg == (3.0, 2.0)
    assert _checks(loss_type="vespo")[name].passed
    _trl_edited(monkeypatch, old, new)
    faulty = _checks(loss_type="vespo")
    assert faulty[name].failed and faulty[name].value > 0.01


@pytest.mark.slow
@pytest.mark.parametrize("opts", [{"importance_sampling_level": "sequence"}, {"loss_type": "luspo"}])
def test_a_sequence_level_ratio_is_stated_and_a_fault_in_it_fails_check_19(monkeypatch, opts):
    """GSPO's ratio (and LUSPO's, which also sums each sequence's tokens) is exp of the mean token
    log-ratio; it was left as a kind, so a ratio from the sum instead passed every check."""
    name = "loss = the declared objective"
    a = _demo(**opts)
    assert a.objective.ratio_level == "sequence" and a.objective_why == ""
    if "loss_type" in opts:
        assert a.objective.aggregation == "seq_mean_token_sum" and a.objective.sum_norm == 1.0
    assert _checks(**opts)[name].passed
    _trl_edited(monkeypatch, "log_importance_weights = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)",
                "log_importance_weights = (log_ratio * mask).sum(-1)")
    faulty = _checks(**opts)
    assert faulty[name].failed and faulty[name].value > 0.01
    if "loss_type" not in opts:                        # the default check, through the sapo variant
        at_default = _checks()[name]
        assert at_default.failed and "sequence-level ratio" in at_default.setting


@pytest.mark.slow
def test_dr_grpos_normalizer_is_stated_and_a_fault_in_it_fails_check_19(monkeypatch):
    """Dr. GRPO divides the token sum by rows x max_completion_length; it was left as a kind, so a
    normalizer that left out max_completion_length (a step that many times too large) passed every
    check."""
    name = "loss = the declared objective"
    healthy = _checks(loss_type="dr_grpo", entropy_coef=0.3)
    assert healthy[name].passed and not healthy[name].na
    _trl_edited(monkeypatch, "loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length)",
                "loss = (per_token_loss * mask).sum() / per_token_loss.size(0)")
    faulty = _checks(loss_type="dr_grpo")
    assert faulty[name].failed and faulty[name].value > 0.1
    at_default = _checks()[name]                       # the default check, through the first variant
    assert at_default.failed and "dr_grpo" in at_default.setting


@pytest.mark.slow
@pytest.mark.parametrize("opts,why", [
    ({"entropy_coef": 0.3, "loss_type": "dapo"}, "entropy bonus beside 'dapo'"),
    ({"use_adaptive_entropy": True}, "use_adaptive_entropy"),
    ({"use_bias_correction_kl": True}, "use_bias_correction_kl"),
    ({"multi_objective_aggregation": "normalize_then_sum"}, "normalize_then_sum"),
])
def test_what_objective_cannot_state_stays_a_kind_with_its_reason(opts, why):
    a = _demo(**opts)
    assert isinstance(a.objective, str) and why in a.objective_why
    assert a.variants == {}        # a variant would inherit the unstated setting


@pytest.mark.slow
def test_batch_scaled_advantages_are_declared_and_checked_at_the_default_through_the_variant(monkeypatch):
    """scale_rewards='batch' divides by the generation batch's reward std. That branch is not taken at
    the default, so check 18 also runs at the variant, which takes it: a batch std taken over the
    group means instead (a fault in TRL's own source) fails there, and at that setting itself."""
    import trl.trainer.grpo_trainer as grpo
    name = "advantages = the declared estimator"
    a = _demo(scale_rewards="batch")
    assert a.objective.advantages == "group_mean_batch_std" and a.objective_why == ""
    healthy = _checks()
    assert healthy[name].passed and not healthy[name].na and healthy[name].value < 1e-5
    assert _checks(scale_rewards="batch")[name].passed
    std = grpo.nanstd

    def std_of_group_means(x, *args, **kwargs):
        if x.dim() == 1 and not args and not kwargs:      # the whole batch's std, batch scaling only
            return std(x.view(-1, 4).mean(1))
        return std(x, *args, **kwargs)
    monkeypatch.setattr(grpo, "nanstd", std_of_group_means)
    faulty = _checks()
    assert faulty[name].failed and "batch-scaled" in faulty[name].setting and faulty[name].value > 0.01
    assert _checks(scale_rewards="batch")[name].failed


@pytest.mark.slow
def test_the_entropy_bonus_is_declared_and_its_sign_checked_at_the_default_through_the_variant(monkeypatch):
    """TRL's bonus acts on the entropies its fused LM head computes, which the tap did not show, so
    the objective was left as a kind: a bonus with the wrong sign passed every check. The tap now
    shows them; the variant of one micro-batch holds a bonus, so the default check sees it."""
    from trl import GRPOTrainer
    name = "loss = the declared objective"
    a = _demo(entropy_coef=0.3)
    assert a.objective.entropy_coef == 0.3 and a.objective.entropy_aggregation == "token_mean"
    assert _checks()[name].passed and _checks(entropy_coef=0.3)[name].passed
    init = GRPOTrainer.__init__

    def flipped(self, *args, **kwargs):       # a bonus that rewards low entropy
        init(self, *args, **kwargs)
        self.entropy_coef = -self.entropy_coef
    monkeypatch.setattr(GRPOTrainer, "__init__", flipped)
    faulty = _checks()
    assert faulty[name].failed and "entropy bonus" in faulty[name].setting and faulty[name].value > 0.1
    assert _checks(entropy_coef=0.3)[name].failed


@pytest.mark.slow
def test_a_stored_reference_log_prob_at_the_wrong_temperature_fails_check_20_at_the_variant():
    """The loss is handed TRL's stored `ref_per_token_logps`, not a recomputation: a reference whose LM head
    ignores the temperature passes at temperature 1 and fails at the temperature-0.7 variant."""
    ref = "reference log-probs = the reference's"
    healthy, faulty = _checks(), _checks(bug="ref_logp_untempered")
    assert healthy[ref].passed and not healthy[ref].na and healthy[ref].value < 1e-6
    assert not faulty[ref].passed and faulty[ref].setting.startswith("temperature 0.7") and faulty[ref].value > 0.01
    at_t07 = _checks(bug="ref_logp_untempered", temperature=0.7)     # at that setting itself: no variant needed
    assert not at_t07[ref].passed and at_t07[ref].setting == ""


@pytest.mark.slow
def test_the_loss_tap_sees_the_reference_log_probs_trl_stored():
    """A stored value corrupted after TRL computed it reaches check 20 (the adapter recomputes nothing)."""
    a = _demo()
    with _quiet():
        batch, truth = a.probe_batch()
        ref = a.make_ref(a.policy())
        rows = a.prepare(a.policy(), batch)
        seen: list = []
        batch["inputs"]["ref_per_token_logps"] += 0.5
        a.loss(a.policy(), batch, [0, 1], rows, ref=ref, tap=lambda event, **v: seen.append(v))
    (got,) = seen
    own = a.log_probs(ref, batch, rows=[0, 1])
    on = got["mask"] > 0
    assert float((got["ref_logp"] - own).abs()[on].max()) == pytest.approx(0.5, abs=1e-5)
    assert got["loss"] is not None and got["logp"].requires_grad


@pytest.mark.slow
@pytest.mark.parametrize("opts,name,why", [
    ({"entropy_coef": 0.3}, "accumulated = one-pass gradient", "entropy bonus is a token mean over each micro-batch"),
    ({"scale_rewards": "batch"}, "advantages depend only on their own group", "the whole batch's reward std"),
    ({"mask_truncated_completions": True}, "mask = policy tokens", "")])
def test_settings_that_change_the_objective_on_purpose_pass(opts, name, why):
    """entropy_coef: TRL's bonus is a per-micro-batch token mean (check 6 by design, with the reason);
    scale_rewards='batch': one std over the batch couples the groups (check 12 by design);
    mask_truncated_completions: the truth leaves out what the sampler cut (check 1 passes outright)."""
    results = _checks(**opts)
    assert not any(r.failed for r in results.values()), {r.name: r.value for r in results.values() if r.failed}
    if why:
        assert why in results[name].by_design and results[name].value > 0
        assert not _checks()[name].by_design           # only where the setting declares it
    else:
        assert results[name].value == 0 and not results[name].by_design
        assert not _checks(bug="mask_shift", **opts)[name].passed      # the truth still catches a shifted mask


@pytest.mark.slow
def test_a_variant_whose_loss_type_the_installed_trl_does_not_know_is_skipped(monkeypatch):
    from rlbisect.frameworks.trl import declared
    a = _demo()
    monkeypatch.setitem(declared.VARIANTS, "no such loss", {"loss_type": "no_such_loss"})
    assert "no such loss" not in declared.variants(a.trainer) and len(declared.variants(a.trainer)) == 2
    monkeypatch.setitem(declared.VARIANTS, "vespo", {"loss_type": "vespo"})   # TRL 1.16 knows it
    assert "vespo" in declared.variants(a.trainer)


@pytest.mark.slow
def test_variants_are_offered_and_built_with_the_same_fault():
    a = _demo(bug="adv_sign")
    label, entropy = a.variants
    assert a.with_settings(**a.variants[entropy]).objective.entropy_coef == 0.05
    assert a.with_settings(**a.variants[entropy]).objective.kind == "sapo"
    assert a.with_settings(**a.variants[entropy]).objective.ratio_level == "sequence"
    b = a.with_settings(**a.variants[label])
    assert b.loss_type == "dr_grpo" and b.trainer.args.gradient_accumulation_steps == 4
    assert b.trainer.args.per_device_train_batch_size == a.trainer.args.per_device_train_batch_size
    assert b._factory is not None and a.with_settings(temperature=0.7).trainer.temperature == 0.7


@pytest.mark.slow
def test_the_declaration_reads_the_config_past_the_trainers_copy_of_it():
    """TRL copies GRPOConfig into trainer attributes; the declaration read those, so a fault in the
    copy (epsilon_high left at epsilon) was declared too, and check 19 passed it."""
    from rlbisect.frameworks.trl.adapter import GRPOAdapter
    healthy = _demo(epsilon_high=0.28)
    assert healthy.objective.clip_high == 0.28
    with _quiet():
        assert not sanity_checks(healthy)["loss = the declared objective"].failed
        faulty = _demo(epsilon_high=0.28)
        faulty.trainer.epsilon_high = faulty.trainer.epsilon_low
        assert sanity_checks(GRPOAdapter(faulty.trainer, seed=1))["loss = the declared objective"].failed


@pytest.mark.slow
@pytest.mark.parametrize("opts,name", [
    ({"top_p": 0.9}, "sampler = trainer log-prob"), ({"top_k": 5}, "sampler = trainer log-prob"),
    ({"repetition_penalty": 1.2}, "sampler = trainer log-prob")])
def test_a_setting_at_which_trl_breaks_an_identity_knowingly_is_declared_not_failed(opts, name):
    """Unmodified TRL failed check 2 at these settings: truncated sampling beside full-vocabulary
    training (trl#6789)."""
    with _quiet():
        results = sanity_checks(_demo(**opts))
    assert results[name].by_design and not results[name].failed
    assert results[name].value > 0.03                   # the identity does not hold: it is not silenced
    assert not [r.name for r in results.values() if r.failed]


def test_an_entropy_quantile_taken_per_micro_batch_is_declared():
    """check 6 failed on unmodified TRL at top_entropy_quantile=0.2 (0.31), where the micro-batches'
    quantiles cut other tokens than one pass's; where they cut the same ones it passes."""
    from rlbisect.frameworks.trl.declared import ACCUMULATION, by_design
    adapter = _demo(top_entropy_quantile=0.2)
    assert "top_entropy_quantile" in by_design(adapter.trainer)[ACCUMULATION]
    assert ACCUMULATION not in by_design(_demo().trainer)


@pytest.mark.slow
def test_a_synced_reference_is_declared_in_the_run_level_checks():
    from rlbisect.check.run_level import run_checks
    with _quiet():
        results = run_checks(_demo(sync_ref_model=True, ref_model_sync_steps=1, ref_model_mixup_alpha=1.0))
    ref = results["reference log-probs = the starting policy's"]
    assert ref.by_design and ref.value > 0.01
    assert not [r.name for r in results.values() if r.failed]
