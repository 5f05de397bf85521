import copy

import torch

from reference_trainer.batch import collate, prepare_batch
from reference_trainer.config import RLConfig, UpdateConfig
from reference_trainer.update import make_ref, minibatch_backward, rl_update


def grad_of(model, batch, cfg, bug=None):
    model.zero_grad()
    mask, old, adv = prepare_batch(model, batch, cfg)
    minibatch_backward(model, batch, torch.arange(len(adv)), mask, old, adv, cfg, bug)
    g = torch.cat([p.grad.flatten() for p in model.parameters()])
    model.zero_grad()
    return g


def test_correct_accumulation_reproduces_the_one_pass_gradient_and_accum_local_does_not(probe_trajs, tok, base):
    model, batch = copy.deepcopy(base), collate(probe_trajs, tok.pad_id, 8)
    one = grad_of(model, batch, RLConfig())
    for mode in ("token_mean", "seq_mean_token_mean"):
        cfg = RLConfig(update=UpdateConfig(microbatches=4, loss_mode=mode))
        ref = grad_of(model, batch, RLConfig(update=UpdateConfig(loss_mode=mode)))
        assert ((grad_of(model, batch, cfg) - ref).norm() / ref.norm()) < 1e-5
    bad = grad_of(model, batch, RLConfig(), "accum_local")
    assert ((bad - one).norm() / one.norm()) > 0.05


def test_make_ref_is_a_frozen_copy_unless_the_fault(base):
    cfg = RLConfig(update=UpdateConfig(kl_coef=0.1))
    assert make_ref(base, RLConfig()) is None
    ref = make_ref(base, cfg)
    assert ref is not base and not any(p.requires_grad for p in ref.parameters())
    assert make_ref(base, cfg, "ref_is_policy") is base


def test_update_stats_first_step_and_stale_old_logp(probe_trajs, tok, base):
    batch = collate(probe_trajs, tok.pad_id, 8)
    stats = {}
    for bug in (None, "stale_old_logp"):
        model = copy.deepcopy(base)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        stats[bug] = rl_update(model, opt, batch, RLConfig(), bug, None, torch.Generator().manual_seed(0))
    assert stats[None]["logp_gap"] < 1e-6 and stats[None]["approx_kl"] > 0 and stats[None]["ratio_max"] > 1
    assert stats["stale_old_logp"]["approx_kl"] == 0 and stats["stale_old_logp"]["ratio_max"] == 1
    assert stats["stale_old_logp"]["clip_frac"] == 0


def test_entropy_sign_fault_lowers_entropy_more_than_healthy(probe_trajs, tok, base):
    batch = collate(probe_trajs, tok.pad_id, 8)
    after = {}
    for bug in (None, "entropy_sign"):
        model = copy.deepcopy(base)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(3):
            rl_update(model, opt, batch, RLConfig(), bug, None, torch.Generator().manual_seed(0))
        after[bug] = rl_update(model, opt, batch, RLConfig(), None, None, torch.Generator().manual_seed(0))["entropy"]
    assert after["entropy_sign"] < after[None]
