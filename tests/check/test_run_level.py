"""The run-level checks fail on the faults only a trainer's own loop shows, and pass without them."""

import random

import pytest

from reference_trainer.adapter import make_adapter
from rlbisect.check.run_level import RUN_CHECKS, run_checks

CAUGHT = {
    "short runs complete": ["adv_no_eps"],
    "sampler = trainer log-prob, every step": ["sampler_stale", "sampler_top_k"],
    # unsubmitted_rewarded: check 22 at step 0; the 8-task runs rarely run an episode out of turns
    "rewards = the configured reward rule, every step": ["env_cfg_ignored"],
    "old log-probs = the sampler's, every minibatch": ["stale_old_logp", "sampler_stale"],
    "mask and advantages = the step's batch": ["mask_shift", "adv_renorm_in_update", "rewards_misaligned"],
    "reference log-probs = the starting policy's": ["ref_synced", "ref_is_policy", "ref_untempered"],
    "loss = the declared objective, every minibatch": ["kl_k3_reversed", "entropy_untempered", "clip_max"],
    "each step draws distinct training tasks": ["tasks_with_replacement", "heldout_in_train", "group_tiled"],
    "the task stream moves with steps and seeds": ["tasks_reseeded"],
    "optimizer = the configured one": ["weight_decay_ignored"],
    "gradients clipped to max_grad_norm before each step": ["clip_grad_after_step", "grad_clip_hardcoded"],
    "learning rate = the schedule at every step": ["optimizer_lr_ignored", "scheduler_per_microbatch",
                                                   "warmup_zero_first"],
    "optimizer state persists across steps": ["optimizer_per_step"],
    "evaluation leaves training alone": ["eval_train_rng", "log_sample_rng"],
}


@pytest.fixture(scope="module")
def checked():
    cache = {}

    def get(bug=None):
        if bug not in cache:
            cache[bug] = run_checks(make_adapter(bug=bug))
        return cache[bug]
    return get


def test_healthy_passes_every_run_level_check_and_none_is_na(checked):
    res = checked()
    assert list(res) == list(RUN_CHECKS)
    assert all(r.passed and not r.na for r in res.values()), [r for r in res.values() if not r.passed or r.na]


@pytest.mark.parametrize("check,bug", [(c, b) for c, bugs in CAUGHT.items() for b in bugs])
def test_each_check_fails_on_its_faults(checked, check, bug):
    assert not checked(bug)[check].passed, checked(bug)[check]


def test_a_fault_at_the_configured_setting_names_no_other(checked):
    assert checked("optimizer_per_step")["optimizer state persists across steps"].failed
    assert checked("optimizer_per_step")["optimizer state persists across steps"].setting == ""


def test_a_run_that_raises_fails_with_what_it_raised(checked):
    res = checked("adv_no_eps")
    assert res["short runs complete"].detail.startswith("the trainer's loop raised RuntimeError")
    assert all(r.passed is None and r.na for name, r in res.items() if name != "short runs complete")


def test_without_a_tap_only_the_rows_are_checked_and_a_runner_that_does_not_repeat_fails():
    class Unseeded:
        def train_run(self, steps, seed, eval_every):
            return [{"step": s, "reward": random.random()} for s in range(steps)]
    res = run_checks(Unseeded())
    assert not res["same seed, same rows"].passed and res["same seed, same rows"].value == 3
    assert "cannot be told apart" in res["evaluation leaves training alone"].na
    assert "no torch.optim optimizer" in res["optimizer state persists across steps"].na
    assert "takes no `tap`" in res["sampler = trainer log-prob, every step"].na
    assert all(r.passed is None and "has no train_run" in r.na for r in run_checks(object()).values())


LOGGED = "logged metrics = the step's batch"


@pytest.mark.parametrize("module,function,old,new", [
    # the logged reward of the first group only: every dashboard and --metric bisect reads it
    ("train", "rollout_row", '"reward": rewards.mean().item()', '"reward": rewards[0].mean().item()'),
    # the sampler's log-probs collated one position early: only the logged logp_gap reads them
    ("batch", "collate", "pad_rows([t.sample_logp for t in trajs], T, 0.0)[:, 1:]",
     "pad_rows([t.sample_logp for t in trajs], T, 0.0)[:, :-1]"),
])
def test_a_logging_fault_fails_only_the_logged_metrics(checked, monkeypatch, module, function, old, new):
    """Both passed every check: the training numbers stay right, the logged ones do not."""
    import importlib
    from tests.helpers import edit_source
    assert checked()[LOGGED].passed and checked()[LOGGED].value < 1e-9
    edit_source(monkeypatch, getattr(importlib.import_module(f"reference_trainer.{module}"), function), old, new)
    res = run_checks(make_adapter())
    assert [n for n, r in res.items() if r.failed] == [LOGGED]
    assert res[LOGGED].detail.startswith("reward at step" if module == "train" else "logp_gap at step")


def test_rows_that_log_none_of_the_metrics_or_pair_with_no_step_are_na():
    from rlbisect.check.loop import logged
    from rlbisect.check.observe import Record, StepSeen
    from rlbisect.check.thresholds import Thresholds
    steps = [StepSeen(k, None, 2, 0.0, frozenset(), logged={"reward": 0.5}) for k in range(2)]
    rec, t = Record(steps, [], [], []), Thresholds()
    assert "log none of reward" in logged([{"loss": 1.0}] * 2, rec, t).na
    assert "cannot be paired" in logged([{"reward": 0.5}], rec, t).na
    assert logged([{"reward": 0.5}, {"reward": 0.5}], rec, t).passed
    wrong = logged([{"reward": 0.5}, {"critic/score/mean": 0.25}], rec, t)     # verl's name for it
    assert wrong.failed and wrong.value == 0.25 and wrong.detail == "reward at step 1: logged 0.25, the batch's 0.5"


def test_a_clip_below_the_configured_norm_fails_once_the_backward_is_far_above_it(monkeypatch):
    import torch

    from rlbisect.check.loop import _clip_error
    assert _clip_error(0.5, 1000.0, 1.0) == 0.5 and _clip_error(0.5, 0.5, 1.0) == -0.5   # binding / not
    assert _clip_error(1.0, float("nan"), 1.0) == 0.0                                    # backward unseen
    clip = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, max_norm: clip(params, max_norm / 2))
    res = run_checks(make_adapter())      # run B clips at 0.001, far below any backward's norm
    assert not res["gradients clipped to max_grad_norm before each step"].passed
    assert res["gradients clipped to max_grad_norm before each step"].value == pytest.approx(0.5, rel=1e-3)


def test_an_epoch_count_the_loop_never_reads_fails_the_optimizer_check(monkeypatch):
    """Run B asks for two epochs of three minibatches; an update that read its epoch count from a
    misnamed setting (one epoch) stepped half as often, and every run-level check passed."""
    import reference_trainer.train as train_code
    update = train_code.rl_update

    def one_epoch(model, optimizer, batch, cfg, *args, **kwargs):
        cfg = cfg.model_copy(update={"update": cfg.update.model_copy(update={"epochs": 1})})
        return update(model, optimizer, batch, cfg, *args, **kwargs)
    monkeypatch.setattr(train_code, "rl_update", one_epoch)
    res = run_checks(make_adapter())
    assert res["optimizer = the configured one"].failed
    assert res["optimizer = the configured one"].value == 6      # run B: 2 steps x 3 minibatches fewer
    # run A has one epoch, so only run B shows it, and the result says where
    assert res["optimizer = the configured one"].setting.startswith("run B: ") and "epochs=2" in \
        res["optimizer = the configured one"].setting


def test_an_optimizer_option_nobody_configured_fails(monkeypatch):
    """amsgrad switched on in the trainer's optimizer (the configuration says Adam's defaults)."""
    import torch
    adam = torch.optim.Adam

    class AmsGrad(adam):
        def __init__(self, params, **kwargs):
            super().__init__(params, **{**kwargs, "amsgrad": True})
    AmsGrad.__name__ = "Adam"
    monkeypatch.setattr(torch.optim, "Adam", AmsGrad)
    assert run_checks(make_adapter())["optimizer = the configured one"].failed


def test_an_update_on_the_last_steps_batch_fails_the_batch_check_not_the_recorder(monkeypatch):
    """Its loss's mask was narrower than the step's sampled batch, and the recorder raised: "short
    runs complete" failed as if the trainer's loop had, and every other run-level check was n/a."""
    import reference_trainer.train as train_code
    update, last = train_code.rl_update, []

    def on_the_last_batch(model, optimizer, batch, *args, **kwargs):
        last.append(batch)
        return update(model, optimizer, last[-2] if len(last) > 1 else batch, *args, **kwargs)
    monkeypatch.setattr(train_code, "rl_update", on_the_last_batch)
    res = run_checks(make_adapter())
    assert res["mask and advantages = the step's batch"].failed
    assert res["short runs complete"].passed


def test_a_starting_policy_built_by_the_loop_on_a_cold_cache_is_not_the_runs_optimizer(monkeypatch):
    """On a fresh machine TinyAgent's loop behaviour-clones its starting policy before it first samples,
    with an optimizer of its own: those steps were counted as the run's, and four checks failed."""
    import torch

    import reference_trainer.base as base_code
    make_base = base_code.make_base

    def cloned_now(*args, **kwargs):
        clone = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(clone.parameters(), lr=0.5)
        for _ in range(3):
            clone(torch.ones(1, 2)).sum().backward()
            optimizer.step()
        return make_base(*args, **kwargs)
    monkeypatch.setattr(base_code, "make_base", cloned_now)
    res = run_checks(make_adapter())
    assert not any(r.failed for r in res.values()), [n for n, r in res.items() if r.failed]
