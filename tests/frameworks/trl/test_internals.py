"""What the TRL adapter computes from TRL's own tensors (no trainer built: these run without TRL)."""

from __future__ import annotations

import torch

from rlbisect.frameworks.trl._internals import ratio_stats


def test_approx_kl_of_a_tiny_update_survives_float32_cancellation():
    """At lr 1e-6 one step moves a log-prob by ~2e-5: in float32 exp(x) rounds to exactly 1 + x,
    so (r - 1) - log r was 0 and check 7 called old_logp not frozen on unmodified TRL."""
    step = 200 * 2.0 ** -23         # a float32-exact difference of ~2.4e-5 between log-probs
    logp = torch.tensor([[-0.5, -0.75, -0.5]])
    old = logp - torch.tensor([[step, -step, 3.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])      # the unmasked huge gap must not count
    in_float32 = ((logp - old).exp() - 1 - (logp - old)) * mask
    assert float(in_float32.sum()) == 0.0       # the cancellation this guards against
    got = ratio_stats([(logp, old, mask)])
    assert abs(got["approx_kl"] - step ** 2 / 2) < 1e-3 * step ** 2
    assert got["ratio_max"] > 1 > got["ratio_min"]
