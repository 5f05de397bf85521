"""What an older verl needs to run on a CPU machine, supplied as the newer verl supplies it."""

from __future__ import annotations

import torch


def without_flash_attn() -> None:
    """verl < 0.9 unpads through `flash_attn.bert_padding` alone (a CUDA package); verl 0.9 added
    pure-torch equivalents (`attention_utils._fallback_*`). Without flash_attn, an older verl is
    handed those same four functions (written here as 0.9.1 writes them), so its padding code runs."""
    import importlib.util
    if importlib.util.find_spec("flash_attn") is not None:
        return
    from verl.utils import attention_utils as au
    if hasattr(au, "_fallback_unpad_input") or getattr(au, "_rlbisect_fallback", False):
        return
    import torch.nn.functional as F

    def index_first_axis(tensor, indices):
        return tensor[indices]

    def pad_input(hidden_states, indices, batch, seqlen):
        out = hidden_states.new_zeros(batch * seqlen, *hidden_states.shape[1:])
        out[indices] = hidden_states
        return out.view(batch, seqlen, *hidden_states.shape[1:])

    def unpad_input(hidden_states, attention_mask, unused_mask=None):
        masks = attention_mask + unused_mask if unused_mask is not None else attention_mask
        lens = masks.sum(dim=-1, dtype=torch.int32)
        indices = torch.nonzero(masks.flatten(), as_tuple=False).flatten()
        cu = F.pad(torch.cumsum(lens, dim=0, dtype=torch.int32), (1, 0))
        return (hidden_states.reshape(-1, *hidden_states.shape[2:])[indices], indices, cu, lens.max().item(),
                attention_mask.sum(dim=-1, dtype=torch.int32))

    def rearrange(*args, **kwargs):
        import importlib      # einops comes with verl; imported by name, as verl does, only if called
        return importlib.import_module("einops").rearrange(*args, **kwargs)
    au._get_attention_functions = lambda: (index_first_axis, pad_input, rearrange, unpad_input)
    au._rlbisect_fallback = True
