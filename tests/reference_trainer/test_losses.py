import math

import pytest
import torch

from reference_trainer.losses import aggregate, compute_advantages, kl_penalty, policy_loss


def test_group_advantages_have_zero_mean_unit_std_and_respect_groups():
    r = torch.tensor([1., 0, 0, 0, 1, 1, 1, 1])
    adv = compute_advantages(r, group_size=4)
    assert adv[:4].mean().abs() < 1e-6 and adv[4:].abs().max() == 0      # a flat group carries nothing
    assert torch.allclose(adv[:4].std(), torch.tensor(1.0), atol=1e-4)
    assert adv[0] > 0 > adv[1]


def test_loss_modes_weigh_tokens_or_episodes():
    per_token = torch.tensor([[1., 1, 1, 1], [3., 0, 0, 0]])
    mask = torch.tensor([[1., 1, 1, 1], [1., 0, 0, 0]])
    assert aggregate(per_token, mask, "token_mean").item() == pytest.approx(7 / 5)
    assert aggregate(per_token, mask, "seq_mean_token_mean").item() == pytest.approx((1 + 3) / 2)
    with pytest.raises(ValueError):
        aggregate(per_token, mask, "sum")


def test_ppo_clip_and_ratio_stats():
    logp = torch.log(torch.tensor([[0.5, 0.9]]))
    old = torch.log(torch.tensor([[0.25, 0.9]]))                           # ratios 2.0 and 1.0
    loss, stats = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), 0.2, "token_mean")
    assert stats["ratio_max"] == pytest.approx(2.0) and stats["ratio_min"] == pytest.approx(1.0)
    assert stats["clip_frac"] == pytest.approx(0.5)
    assert loss.item() == pytest.approx(-(1.2 + 1.0) / 2)                # the clipped ratio pays at most 1 + eps
    assert stats["approx_kl"] == pytest.approx(((2 - 1) - math.log(2)) / 2)


def test_ratio_one_gives_zero_kl_and_no_clipping():
    logp = torch.randn(4, 6).clamp(max=0)
    _, stats = policy_loss(logp, logp.clone(), torch.randn(4), torch.ones(4, 6), 0.2, "token_mean")
    assert stats == {"clip_frac": 0.0, "ratio_max": 1.0, "ratio_min": 1.0, "approx_kl": 0.0}


def test_kl_kinds():
    logp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -2.0])
    assert torch.allclose(kl_penalty(logp, ref, "k1"), torch.tensor([0.5, 0.0]))
    x = torch.tensor(-0.5)
    assert torch.allclose(kl_penalty(logp, ref, "k3")[0], x.exp() - x - 1)
    assert kl_penalty(logp, logp, "k3").abs().max() == 0 and (kl_penalty(logp, ref, "k3") >= 0).all()
    with pytest.raises(ValueError):
        kl_penalty(logp, ref, "k2")
