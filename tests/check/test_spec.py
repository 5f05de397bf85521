"""The declarations' own arithmetic, against numbers worked out by hand."""

import math

import pytest
import torch

from rlbisect.check.spec import Objective, Schedule, advantages, kl_estimate, lr_factor, objective_loss


def test_schedules_warm_up_then_hold_or_decay():
    assert [lr_factor(Schedule(warmup=4), n) for n in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    hf = Schedule(warmup=4, warmup_from_zero=True)        # Hugging Face: the first step at lr 0
    assert [lr_factor(hf, n) for n in range(5)] == [0.0, 0.25, 0.5, 0.75, 1.0]
    linear = Schedule(kind="linear", warmup=2, total=6)
    assert [lr_factor(linear, n) for n in range(8)] == pytest.approx([0.5, 1.0, 1.0, 0.75, 0.5, 0.25, 0.0, 0.0])
    cosine = Schedule(kind="cosine", total=4, min_ratio=0.1)
    assert [lr_factor(cosine, n) for n in (0, 2, 4)] == pytest.approx([1.0, 0.55, 0.1])


def test_advantage_estimators():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0])
    grpo = advantages(r, 4, Objective(adv_eps=0.0))
    assert grpo[:4].tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5]) and grpo[4:].isnan().all()
    assert advantages(r, 4, Objective())[4:].tolist() == [0.0] * 4             # a flat group: 0, with eps
    assert advantages(r, 4, Objective(advantages="group_mean"))[:4].tolist() == [0.75, -0.25, -0.25, -0.25]
    assert advantages(r, 4, Objective(advantages="loo"))[:4].tolist() == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])


def test_kl_estimators_are_schulmans():
    logp, ref = torch.tensor([-1.0]), torch.tensor([-1.5])      # x = ref - logp = -0.5
    assert kl_estimate(logp, ref, "k1").item() == pytest.approx(0.5)
    assert kl_estimate(logp, ref, "k2").item() == pytest.approx(0.125)
    assert kl_estimate(logp, ref, "k3").item() == pytest.approx(math.exp(-0.5) + 0.5 - 1)


def test_the_clipped_surrogate_by_hand():
    old = torch.zeros(1, 4)
    logp = torch.tensor([[math.log(1.5), math.log(1.5), math.log(0.5), math.log(0.5)]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    spec = Objective(clip_low=0.2, clip_high=0.2)
    # A = 1: min(1.5, 1.2) = 1.2 on the first two tokens, min(0.5, 0.8) = 0.5 on the third
    loss = objective_loss(spec, mask, old, torch.tensor([1.0]), logp=logp)
    assert loss.item() == pytest.approx(-(1.2 + 1.2 + 0.5) / 3)
    # A = -1: min(-1.5, -1.2) = -1.5, and min(-0.5, -0.8) = -0.8 (clipped, constant)
    lp = logp.clone().requires_grad_()
    loss = objective_loss(spec, mask, old, torch.tensor([-1.0]), logp=lp)
    assert loss.item() == pytest.approx((1.5 + 1.5 + 0.8) / 3)
    loss.backward()
    assert lp.grad[0, 2] == 0 and lp.grad[0, 0] != 0 and lp.grad[0, 3] == 0


def test_terms_aggregate_as_declared():
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    per_token = torch.tensor([[1.0, 2.0, 3.0], [10.0, 99.0, 99.0]])
    logits = torch.zeros(2, 3, 5)
    targets = torch.zeros(2, 3, dtype=torch.long)
    lp = math.log(1 / 5)
    old = torch.full((2, 3), lp)
    ref = old - per_token                      # k1 = logp - ref = per_token
    kl = Objective(kl_coef=1.0, kl_estimator="k1", clip_low=10, clip_high=10)
    zero = torch.zeros(2)
    token = objective_loss(kl, mask, old, zero, logits=logits, targets=targets, ref_logp=ref)
    episode = objective_loss(Objective(kl_coef=1.0, kl_estimator="k1", aggregation="seq_mean_token_mean"),
                             mask, old, zero, logits=logits, targets=targets, ref_logp=ref)
    assert token.item() == pytest.approx(16 / 4) and episode.item() == pytest.approx((2 + 10) / 2)
    dr_grpo = objective_loss(Objective(kl_coef=1.0, kl_estimator="k1", aggregation="seq_mean_token_sum", sum_norm=3.0),
                             mask, old, zero, logits=logits, targets=targets, ref_logp=ref)
    assert dr_grpo.item() == pytest.approx((6 + 10) / 2 / 3)       # each row's token sum, their mean, / 3
    entropy = objective_loss(Objective(entropy_coef=1.0), mask, old, zero, logits=logits, targets=targets)
    assert entropy.item() == pytest.approx(-math.log(5))          # uniform over 5 tokens
    with pytest.raises(AssertionError, match="entropy term needs the logits"):
        objective_loss(Objective(entropy_coef=1.0), mask, old, zero, logp=old)


def test_an_entropy_quantile_trains_only_the_high_entropy_tokens():
    """top_entropy_quantile 0.5 over four trained tokens of entropies 1..4 (the padded fifth ignored):
    the quantile at 0.5 is 2.5, so the tokens of entropy 3 and 4 carry the policy term and the bonus,
    and the denominator still counts all four."""
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    entropy = torch.tensor([[3.0, 1.0, 4.0, 2.0, 9.0]])
    old = torch.zeros(1, 5)
    logp = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.5]]).log().requires_grad_()    # ratios 0.1..0.5, unclipped below
    spec = Objective(clip_low=0.95, clip_high=0.95, top_entropy_quantile=0.5)
    loss = objective_loss(spec, mask, old, torch.tensor([1.0]), logp=logp, entropy=entropy)
    assert loss.item() == pytest.approx(-(0.1 + 0.3) / 4)
    loss.backward()
    assert [g != 0 for g in logp.grad[0].tolist()] == [True, False, True, False, False]
    bonus = objective_loss(Objective(entropy_coef=1.0, top_entropy_quantile=0.5), mask, old, torch.tensor([0.0]),
                           logp=logp.detach(), entropy=entropy)
    assert bonus.item() == pytest.approx(-(3 + 4) / 2)
    every = objective_loss(Objective(clip_low=0.95, clip_high=0.95), mask, old, torch.tensor([1.0]),
                           logp=logp.detach(), entropy=entropy)
    assert every.item() == pytest.approx(-(0.1 + 0.2 + 0.3 + 0.4) / 4)
    with pytest.raises(AssertionError, match="entropy quantile needs"):
        objective_loss(spec, mask, old, torch.tensor([1.0]), logp=logp.detach())


def test_vespos_gamma_weight_by_hand():
    """One sequence, log-ratios 0.1 and 0.2 (w = e^0.3), A = 1: phi = exp(3 + 2 * 0.3 - 3 e^0.3),
    detached, so the gradient is -phi / 2 on each token; A = -1 takes (k, lam) = (3, 2)."""
    old = torch.tensor([[-1.0, -2.0, -3.0]])
    logp = (old + torch.tensor([[0.1, 0.2, 5.0]])).requires_grad_()       # the third is padding
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss = objective_loss(Objective(kind="vespo"), mask, old, torch.tensor([1.0]), logp=logp)
    phi = math.exp(3 + 2 * 0.3 - 3 * math.exp(0.3))
    assert loss.item() == pytest.approx(-phi * (-0.9 - 1.8) / 2)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-phi / 2, -phi / 2, 0.0])
    neg = objective_loss(Objective(kind="vespo"), mask, old, torch.tensor([-1.0]), logp=logp.detach())
    assert neg.item() == pytest.approx(math.exp(2 + 3 * 0.3 - 2 * math.exp(0.3)) * (-0.9 - 1.8) / 2)


def test_a_sequence_level_ratio_is_the_mean_token_log_ratio():
    """GSPO: one ratio per row, exp of the mean log-ratio over its trained tokens (0.1 and 0.3, so
    e^0.2; the padded third ignored), clipped like a token's and differentiated through each token."""
    old = torch.zeros(1, 3)
    logp = torch.tensor([[0.1, 0.3, 7.0]]).requires_grad_()
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    spec = Objective(ratio_level="sequence", clip_low=0.2, clip_high=0.5)
    loss = objective_loss(spec, mask, old, torch.tensor([1.0]), logp=logp)
    assert loss.item() == pytest.approx(-math.exp(0.2))
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-math.exp(0.2) / 2, -math.exp(0.2) / 2, 0.0])
    clipped = objective_loss(Objective(ratio_level="sequence", clip_high=0.1), mask, old, torch.tensor([1.0]),
                             logp=logp.detach())
    assert clipped.item() == pytest.approx(-1.1)
