import pytest
import torch

from reference_trainer.policy import Policy


def test_size_is_about_150k(tok):
    n = sum(p.numel() for p in Policy(len(tok)).parameters())
    assert 120_000 < n < 200_000


def test_kv_cache_step_matches_full_forward(tok):
    torch.manual_seed(0)
    model = Policy(len(tok))
    ids = torch.randint(0, len(tok), (3, 30))
    full = model(ids)
    cache, steps = None, []
    for t in range(30):
        logits, cache = model.step(ids[:, t], t, cache)
        steps.append(logits)
    assert (torch.stack(steps, 1) - full).abs().max() < 1e-5


def test_too_long_is_an_error(tok):
    model = Policy(len(tok))
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, model.cfg.max_len + 1, dtype=torch.long))
