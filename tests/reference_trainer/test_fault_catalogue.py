"""The fault catalogue: no switch is a no-op, and the healthy path is untouched by it.

Each fault is run at the setting it needs (`faults.NEEDS`) on a small training configuration (2 tasks x
8 episodes per step, 2 steps, evaluation every step) next to the healthy run at the same setting, and
must change at least one row (or raise / go non-finite). The clipping faults only bite once the ratio
leaves [1 - eps, 1 + eps], which two small steps do not reach: they are probed on the clipped
surrogate itself with ratios outside the range.
"""

import copy
import math

import pytest
import torch

from reference_trainer.config import EnvConfig, RLConfig, SamplerConfig, UpdateConfig
from reference_trainer.env import Env
from reference_trainer.faults import BUGS, CATALOGUE, CHAPTER, NEEDS, check_bug
from reference_trainer.losses import compute_advantages, policy_loss
from reference_trainer.tasks import make_tasks
from reference_trainer.train import train
from rlbisect.metrics import comparable

UPDATE_KNOBS = {"kl_coef", "loss_mode", "microbatches", "entropy_coef", "weight_decay", "max_grad_norm",
                "lr_schedule", "warmup_steps"}
TRAIN_KNOBS = {"temperature", "max_turns", "reward", *UPDATE_KNOBS}
SURROGATE_ONLY = {"clip_low_eps", "clip_max", "clip_min_before_advantage"}   # need ratios outside the clip range
ENVIRONMENT_ONLY = {"malformed_executed"}   # needs a malformed edit call, which a short run rarely samples
# Bites at the defaults only when a truncated episode's last code passes the public tests, which 32
# episodes rarely show; a 2-turn budget truncates most of them.
SMALL_RUN_SETTING = {"unsubmitted_rewarded": {"max_turns": 2}}


def small_config(**needs) -> RLConfig:
    sampler = {"tasks_per_step": 2, **{k: v for k, v in needs.items() if k == "temperature"}}
    update = {k: v for k, v in needs.items() if k in UPDATE_KNOBS}
    env = {k: v for k, v in needs.items() if k in ("max_turns", "reward")}
    return RLConfig(sampler=SamplerConfig(**sampler), update=UpdateConfig(**update), env=EnvConfig(**env),
                    eval_episodes=1)


@pytest.fixture(scope="module")
def run_small(base, tok):
    tasks, held_out = make_tasks("train"), make_tasks("heldout")[:4]
    cache = {}

    def run(bug=None, **needs):
        key = (bug, tuple(sorted(needs.items())))
        if key not in cache:
            cfg = small_config(**{k: v for k, v in needs.items() if k in TRAIN_KNOBS})
            try:
                rows = train(copy.deepcopy(base), tasks, tok, cfg, 2, bug, held_out, eval_every=1)
                cache[key] = [comparable(r) for r in rows]
            except (ValueError, RuntimeError) as e:      # a fault may raise: that is a change too
                cache[key] = f"{type(e).__name__}: {e}"
        return cache[key]
    return run


def nonfinite(rows) -> bool:
    return isinstance(rows, list) and any(isinstance(v, float) and not math.isfinite(v) for r in rows for v in r.values())


def test_the_catalogue_is_documented_and_beside_the_chapters_seven():
    assert list(BUGS)[:7] == list(CHAPTER) and len(CATALOGUE) >= 15 and not set(CHAPTER) & set(CATALOGUE)
    assert all(desc and "->" in desc for desc in CATALOGUE.values())   # what it does -> who should see it
    assert set(NEEDS) <= set(CATALOGUE) and all(check_bug(b) == b for b in BUGS)
    with pytest.raises(ValueError, match="unknown bug"):
        check_bug("no_such_fault")


@pytest.mark.parametrize("needs", [{}, {"kl_coef": 0.1, "temperature": 0.7}, {"loss_mode": "seq_mean_token_mean",
                                                                             "microbatches": 2}])
def test_healthy_runs_are_bit_reproducible_at_every_setting_the_catalogue_uses(run_small, base, tok, needs):
    first = run_small(None, **needs)
    cfg = small_config(**needs)
    again = train(copy.deepcopy(base), make_tasks("train"), tok, cfg, 2, None, make_tasks("heldout")[:4], eval_every=1)
    assert isinstance(first, list) and first == [comparable(r) for r in again] and not nonfinite(first)


@pytest.mark.parametrize("bug", [b for b in CATALOGUE if b not in SURROGATE_ONLY | ENVIRONMENT_ONLY])
def test_each_fault_changes_a_short_run_at_the_setting_it_needs(run_small, bug):
    needs = {k: v for k, v in {**NEEDS.get(bug, {}), **SMALL_RUN_SETTING.get(bug, {})}.items() if k in TRAIN_KNOBS}
    healthy, faulty = run_small(None, **needs), run_small(bug, **needs)
    assert isinstance(healthy, list) and not nonfinite(healthy)
    assert faulty != healthy or nonfinite(faulty), f"{bug} left the run bit-identical at {needs or 'the defaults'}"


@pytest.mark.parametrize("bug", sorted(SURROGATE_ONLY))
def test_clip_faults_change_the_surrogates_gradient_outside_the_clip_range(bug):
    ratio = torch.tensor([[0.5, 0.7, 1.0, 1.3, 1.6]])
    adv = torch.tensor([-1.0]), torch.tensor([1.0])
    mask = torch.ones_like(ratio)

    def grad(b, a):
        logp = ratio.log().requires_grad_()
        loss, _ = policy_loss(logp, torch.zeros_like(ratio), a, mask, 0.2, "token_mean", b)
        loss.backward()
        return logp.grad
    assert any(not torch.equal(grad(None, a), grad(bug, a)) for a in adv)
    inside = torch.tensor([[0.9, 1.0, 1.1]])              # inside [1 - eps, 1 + eps] nothing changes
    for a in adv:
        lp = inside.log()
        assert torch.equal(policy_loss(lp, torch.zeros_like(lp), a, torch.ones_like(lp), 0.2, "token_mean")[0],
                           policy_loss(lp, torch.zeros_like(lp), a, torch.ones_like(lp), 0.2, "token_mean", bug)[0])


def test_a_malformed_edit_is_run_under_its_fault_and_rejected_without(tok):
    task = make_tasks("train")[0]
    for call in ("<call> edit <end>", "<call> edit fix <end>"):
        healthy, faulty = Env(task, tok, EnvConfig()), Env(task, tok, EnvConfig(), "malformed_executed")
        assert healthy.step(tok.encode(call)) == tok.encode("<obs> malformed") and healthy.code == task.buggy
        assert faulty.step(tok.encode(call)) == tok.encode("<obs> ok") and faulty.code == task.fixes[0]
        assert healthy.info.n_invalid == 1 and faulty.info.n_invalid == 0


def test_advantage_faults_on_a_flat_group_and_a_mixed_one():
    rewards = torch.tensor([0.0] * 8 + [1.0, 0.0] * 4)   # one flat group, one mixed
    healthy = compute_advantages(rewards, 8)
    assert torch.isfinite(healthy).all() and healthy[:8].eq(0).all()
    assert torch.isnan(compute_advantages(rewards, 8, bug="adv_no_eps")[:8]).all()
    assert not torch.equal(compute_advantages(rewards, 8, bug="adv_batch_std"), healthy)
    assert not torch.equal(compute_advantages(rewards, 8, bug="adv_wrong_axis"), healthy)
