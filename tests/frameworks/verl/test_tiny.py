"""The tiny verl policy, without verl (transformers only)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")


def test_the_policy_computes_at_its_own_dtype_under_a_bf16_autocast():
    """verl before 0.8 opens a bf16 autocast around the forward whatever the configured dtype: the
    tiny policy's logits are its fp32 ones inside it, where a plain Qwen2 rounds them to bf16."""
    from transformers import Qwen2ForCausalLM

    from rlbisect.frameworks.verl import tiny
    model = tiny.policy(0)
    plain = Qwen2ForCausalLM(model.config)
    plain.load_state_dict(model.state_dict())
    ids = torch.tensor([[2, 5, 6, 3, 7, 1]])
    with torch.no_grad():
        ours, theirs = model(input_ids=ids).logits, plain(input_ids=ids).logits
        assert torch.equal(ours, theirs)           # the same model outside any autocast
        with torch.autocast("cpu", dtype=torch.bfloat16):
            inside, rounded = model(input_ids=ids).logits, plain(input_ids=ids).logits
    assert inside.dtype == torch.float32 and torch.equal(inside, ours)
    assert not torch.equal(rounded.float(), ours)    # what the checks' fp32 limits would have read
