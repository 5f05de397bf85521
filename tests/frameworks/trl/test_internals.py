"""What the TRL adapter computes from TRL's own tensors, and how it keeps TRL's threads out of its forks."""

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


def test_a_trainer_built_in_a_forked_child_does_not_wait_on_the_telemetry_lock():
    """The run-level checks build trainers in a forked child. Hugging Face's telemetry thread holds
    its queue's lock now and then; forked at such a moment, the child's trainer waited on it forever
    (`rlbisect check` on TRL hung once in two benchmark runs). Held here on purpose across the fork."""
    import os
    import signal
    import time

    import pytest
    pytest.importorskip("trl")
    from huggingface_hub.utils import _telemetry

    from rlbisect.frameworks.trl import tiny
    from rlbisect.frameworks.trl._internals import require_trl
    require_trl()
    with _telemetry._TELEMETRY_QUEUE.mutex:
        pid = os.fork()
        if pid == 0:       # the child: build a trainer, as variant_run does, and leave
            try:
                tiny.build_trainer()
            finally:
                os._exit(0)
    deadline = time.monotonic() + 120
    while (reaped := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.2)
    if reaped == (0, 0):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert reaped != (0, 0), "the forked child hung building a trainer"
