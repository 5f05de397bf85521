"""A tiny policy, task and reward built in code: what `rlbisect.frameworks.verl:demo` trains.

No hub, no network, no Ray, no vLLM; verl's actor code does the training.

A random-init two-layer Qwen2 over a 20-word vocabulary; prompts "add dA dB =" (some with a leading
"the", so prompts are left-padded as verl's rollout pads them); the reward is verl's
`NaiveRewardManager` with a `compute_score` of 1 for the right digit word first, 0.5 for it anywhere.
Sampling is Hugging Face `generate` (verl's own rollout is vLLM/SGLang: not driven here); its
processed scores are recorded as the sampler's truth.

Faults (``bug=``) are switches on verl's code paths, each modelled on a report in verl's tracker,
so the tests show every check failing on the fault it is meant for.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Any, Iterator

import torch

WORDS = ["<pad>", "<eos>", "add", "=", *[f"d{i}" for i in range(10)], "the", "is", "so", "ok", "no", "yes"]
PAD, EOS = 0, 1
GROUP = 4            # responses per prompt (rollout.n)
MAX_NEW = 6          # response length

# bug -> (what it does, the check meant to catch it, the report it is modelled on)
FAULTS = {
    "microbatch_token_mean": "each micro-batch normalised by its own token count, scaled by its share of rows "
                             "(legacy dp_actor; verl#5625, PR #5641, discussion #7321) (6, at uneven micro-batches)",
    "accum_unscaled": "each micro-batch's loss a full token mean, summed over micro-batches without normalising "
                      "(verl PR #3332, PR #906) (6)",
    "logp_untempered": "the actor handed temperature 1, not the rollout's: its log-probs from unscaled logits "
                       "(the rollout/actor temperature mismatch of verl#4162, PR #4252) (2 at temperature 0.7; "
                       "19 at the variant)",
    "entropy_untempered": "the entropy bonus from the logits before the temperature (OpenRLHF PR #1319; verl "
                          "scales once in prepare_model_outputs) (19, at the variant)",
    "kl_reversed": "kl_penalty called with the policy and reference swapped: KL(ref || policy) "
                   "(the direction verl#3061 asks about) (19)",
    "pad_in_mask": "the response mask built without stopping at EOS: padding after it is trained on "
                   "(verl#3805) (1, 13)",
    "eos_unmasked": "the loss mask shifted so the EOS token's loss is dropped (verl#3562) (1, 13)",
    "std_flag_ignored": "norm_adv_by_std_in_grpo not forwarded: advantages divided by the group std even when "
                        "off (verl PR #7893) (18, at norm_adv_by_std_in_grpo=False)",
    "ref_is_policy": "the reference log-probs taken from the policy being trained (9, 11)",
}


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="no"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


@functools.lru_cache(maxsize=None)
def own_dtype(cls: Any) -> type:
    """``cls`` computing at its own dtype whatever autocast the caller opens: verl before 0.8 runs the
    forward under a bf16 autocast whatever the configured dtype, and the checks' fp32 limits are
    about verl's arithmetic, not bf16's rounding. Snapshots record it (``ignores_autocast``) so a
    replay builds the same."""
    def forward(self, *args: Any, **kw: Any) -> Any:
        with torch.autocast("cpu", enabled=False):
            return cls.forward(self, *args, **kw)
    return type(f"OwnDtype{cls.__name__}", (cls,), {"forward": forward, "ignores_autocast": True})


@functools.lru_cache(maxsize=2)
def _policy(seed: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=None)
    model = own_dtype(Qwen2ForCausalLM)(cfg)
    model.config._attn_implementation = "eager"     # the same numbers padded or not, on any CPU
    return model


def policy(seed: int = 0) -> torch.nn.Module:
    import copy
    return copy.deepcopy(_policy(seed))


def tasks(n: int = 48) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        a, b = torch.randint(0, 5, (2,), generator=g).tolist()
        out.append({"id": i, "prompt": ("the " if i % 3 == 0 else "") + f"add d{a} d{b} =", "answer": f"d{a + b}"})
    return out


def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """The configured reward rule (verl's `compute_score` signature)."""
    words = solution_str.split()
    return 1.0 if words[:1] == [ground_truth] else 0.5 if ground_truth in words else 0.0


def prompts_tensor(rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and mask, as verl's dataset hands prompts to the rollout."""
    ids = [[WORDS.index(w) for w in r["prompt"].split()] for r in rows]
    width = max(map(len, ids))
    out = torch.tensor([[PAD] * (width - len(x)) + x for x in ids])
    return out, (out != PAD).long()


def sample(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, temperature: float, seed: int):
    """HF `generate` as the sampler -> (responses [B, MAX_NEW] padded with PAD after EOS, the
    sampler's log-prob of each drawn token, the positions it owns (up to and including the first
    EOS), tokens drawn per row): from its processed scores, apart from verl's mask code."""
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, do_sample=True,
                             temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=MAX_NEW,
                             eos_token_id=EOS, pad_token_id=PAD, output_scores=True, return_dict_in_generate=True)
    tokens = out.sequences[:, prompt_ids.shape[1]:]
    steps = len(out.scores)
    scores = torch.stack(out.scores, 1).float()
    logp = scores.log_softmax(-1).gather(-1, tokens[..., None]).squeeze(-1)
    hit = tokens == EOS
    ended = hit.int().cumsum(1) - hit.int()
    owned = (ended == 0).float()
    drawn = torch.where(hit.any(1), hit.int().argmax(1) + 1, torch.full_like(hit[:, 0], steps, dtype=torch.long))
    pad = MAX_NEW - tokens.shape[1]
    if pad:
        tokens = torch.cat([tokens, tokens.new_full((tokens.shape[0], pad), PAD)], 1)
        logp, owned = (torch.cat([x, x.new_zeros(x.shape[0], pad)], 1) for x in (logp, owned))
    return tokens, logp * owned, owned, drawn


def rescored(rows: list[dict], tokens: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
    """The reward rule applied again to each response as the sampler drew it (decoded here)."""
    tok = tokenizer()
    texts = [tok.decode(t[: int(n)].tolist(), skip_special_tokens=True) for t, n in zip(tokens, drawn)]
    return torch.tensor([compute_score("tiny", s, r["answer"]) for s, r in zip(texts, rows)])


def inject(bug: str | None) -> Any:
    """A context manager switching the fault on in verl's modules for the duration of one call
    (verl's code elsewhere untouched); None for no fault."""
    if bug is not None and bug not in FAULTS:
        raise ValueError(f"unknown bug {bug!r} (faults: {', '.join(FAULTS)})")
    return _switched(bug)


@contextmanager
def _switched(bug: str | None) -> Iterator[None]:
    from verl.trainer.ppo import core_algos
    from verl.workers.engine.fsdp import transformer_impl as ti
    from verl.workers.utils import losses
    saved: list[tuple[Any, str, Any]] = []

    def swap(obj, name, value):
        saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)
    if bug == "kl_reversed":
        kl = losses.kl_penalty
        swap(losses, "kl_penalty", lambda logprob, ref_logprob, kl_penalty: kl(ref_logprob, logprob, kl_penalty))
    elif bug == "logp_untempered":
        # the actor handed temperature 1 instead of the rollout's: its log-probs (and entropy)
        # from unscaled logits, whichever way this verl scales them
        inputs = ti.FSDPEngineWithLMHead.prepare_model_inputs

        def untempered(self, micro_batch):
            from verl.utils import tensordict_utils as tu
            tu.assign_non_tensor(micro_batch, temperature=1.0)
            return inputs(self, micro_batch)
        swap(ti.FSDPEngineWithLMHead, "prepare_model_inputs", untempered)
    elif bug == "entropy_untempered":
        prepare = ti.FSDPEngineWithLMHead.prepare_model_outputs

        def outputs(self, output, output_args, micro_batch, *rest, **kw):
            from verl.utils import torch_functional as verl_F
            # before verl scales the logits (in place before 0.9): the entropy of the raw ones
            raw = verl_F.entropy_from_logits(output.logits.clone())
            out = prepare(self, output, output_args, micro_batch, *rest, **kw)
            if "entropy" in out:
                cu = micro_batch["input_ids"].offsets()
                out["entropy"] = torch.nested.nested_tensor_from_jagged(
                    torch.cat([e[: int(n)] for e, n in zip(raw, cu.diff())]), cu)
            return out
        swap(ti.FSDPEngineWithLMHead, "prepare_model_outputs", outputs)
    elif bug in ("microbatch_token_mean", "accum_unscaled"):
        agg = core_algos.agg_loss

        def local(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None, global_batch_size=None,
                  loss_scale_factor=None):
            # the micro-batch's own normaliser, as dp_actor's agg_loss had it before global batch info
            own = agg(loss_mat, loss_mask, loss_agg_mode)
            if bug == "microbatch_token_mean" and global_batch_size:
                return own * loss_mask.shape[0] / global_batch_size     # its share of the rows
            return own
        swap(core_algos, "agg_loss", local)
        swap(losses, "agg_loss", local)
    try:
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)

