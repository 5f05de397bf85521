"""What the sampler did on TRL's generation path, recorded apart from TRL's batch code: the
processed scores HF `generate` sampled from, the tokens it drew per row, and the configured reward
rule applied again. (Split from `_internals.py`; each function names the TRL code it mirrors.)
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Hashable, Iterator, Optional

import torch

from rlbisect.check.adapter import Truth
from rlbisect.frameworks.trl._internals import eos_ids, loss_mask, patched, tokenizer, unwrapped

@contextmanager
def recording_generation(trainer, record: dict) -> Iterator[None]:
    """Record what the sampler did on TRL's generation path.

    - `_generate_single_turn` (grpo_trainer.py, "Regular generation path") calls
      `unwrapped_model.generate(**generate_inputs, generation_config=...)` and keeps only token ids:
      the model's `generate` is wrapped to also return the *processed* scores (after temperature,
      top-k/top-p: the distribution HF actually sampled from) and their log-prob of each sampled token.
    - `_generate` returns (prompt_ids, completion_ids, tool_mask, completions, logprobs, extra,
      images, tool_images): kept, so the same generation can be re-scored with other rewards.
    - `_calculate_rewards(inputs, prompts, completions, completion_ids_list)` -> [B, n_funcs]: kept,
      weighted as `_generate_and_score_completions` weights them for its logged reward.
    """
    model: Any = unwrapped(trainer)   # a transformers PreTrainedModel
    generate, gen_out, rewards = model.generate, trainer._generate, trainer._calculate_rewards
    eos = torch.tensor(eos_ids(trainer))

    def recording_generate(*args, **kwargs):
        out = generate(*args, **{**kwargs, "output_scores": True, "return_dict_in_generate": True})
        prompt_len = kwargs["input_ids"].shape[1]
        tokens = out.sequences[:, prompt_len:]
        scores = torch.stack(out.scores, 1).float()                       # [B, C, V] processed
        logp = scores.log_softmax(-1).gather(-1, tokens[..., None]).squeeze(-1)
        # the sampler owns a position until it has emitted an end-of-sequence token
        ended = torch.isin(tokens, eos).int().cumsum(1)
        owned = ((ended - torch.isin(tokens, eos).int()) == 0).float()
        record["sampler"] = (tokens, torch.where(owned > 0, logp, torch.zeros_like(logp)), owned)
        # generate's own stop tokens (the generation_config it was handed), not TRL's list: where it draws
        cfg = kwargs.get("generation_config")
        stop = getattr(cfg, "eos_token_id", None)
        stop = eos if stop is None else torch.tensor([stop] if isinstance(stop, int) else list(stop))
        record["stop"] = stop
        record["drawn"] = drawn_counts(tokens, len(out.scores), stop)
        return out.sequences

    def keep_generate(prompts):
        record["generated"] = gen_out(prompts)
        return record["generated"]

    def keep_rewards(*args, **kwargs):
        record["rewards_per_func"] = rewards(*args, **kwargs)
        return record["rewards_per_func"]

    with patched(model, generate=recording_generate), \
            patched(trainer, _generate=keep_generate, _calculate_rewards=keep_rewards):
        yield


def drawn_counts(tokens: torch.Tensor, steps: int, eos: torch.Tensor) -> torch.Tensor:
    """[B] tokens the sampler drew per row, counted from `generate`'s own record: `steps` sampling
    steps (one processed score each), and a row that emitted an end-of-sequence token drew up to
    and including it (HF fills finished rows with padding it did not sample). Counted here, apart
    from TRL's completion_mask code (`_generate_single_turn`'s "Mask everything after the first
    EOS token") and from the owner tags."""
    hit = torch.isin(tokens[:, :steps], eos)
    return torch.where(hit.any(1), hit.int().argmax(1) + 1, torch.full_like(hit[:, 0], steps, dtype=torch.long))


def configured_rewards(trainer, inputs: list[dict], tokens: torch.Tensor, eos: torch.Tensor):
    """[B] the configured reward rule applied again to each completion, or None where it cannot be
    applied apart from TRL's scoring path (reward models, async functions, environments).

    Mirrors `_calculate_rewards` (sync reward functions called with prompts, completions,
    completion_ids and the dataset's other columns) and `_generate_and_score_completions`'s
    `(rewards_per_func * reward_weights).nansum(1)`, but from the configuration: `args.reward_weights`
    (GRPOTrainer copies it to `self.reward_weights` at construction), the sampler's tokens cut
    after the first of `eos` (generate's stop tokens) and decoded here as `_generate` decodes (`batch_decode(...,
    skip_special_tokens=True)`), and no-op sinks for `log_extra` / `log_metric` so nothing is logged twice.
    """
    from trl.data_utils import is_conversational
    import inspect

    import trl.trainer.utils as trl_utils
    # TRL < 1.12 has no is_async_callable: a reward function is awaited when a coroutine function
    is_async_callable: Any = getattr(trl_utils, "is_async_callable", inspect.iscoroutinefunction)
    funcs = trainer.reward_funcs
    if getattr(trainer, "environment_factories", None) is not None or \
            any(isinstance(f, torch.nn.Module) or is_async_callable(f) for f in funcs):
        return None
    ids = [row[: int(n)].tolist() for row, n in zip(tokens, drawn_counts(tokens, tokens.shape[1], eos))]
    texts = trainer.processing_class.batch_decode(ids, skip_special_tokens=True)
    prompts = [x["prompt"] for x in inputs]
    if is_conversational({"prompt": prompts[0]}):
        completions = [[{"role": "assistant", "content": t}] for t in texts]
    else:
        completions = texts
    columns = {k: [x[k] for x in inputs] for k in inputs[0] if k not in ("prompt", "completion", "completion_ids")}
    per_func = torch.zeros(len(inputs), len(funcs))
    for i, f in enumerate(funcs):
        out = f(prompts=prompts, completions=completions, completion_ids=ids, trainer_state=trainer.state,
                log_extra=lambda *a, **k: None, log_metric=lambda *a, **k: None, **columns)
        per_func[:, i] = torch.tensor([torch.nan if r is None else r for r in out], dtype=torch.float32)
    configured = trainer.args.reward_weights
    w = torch.tensor(configured, dtype=torch.float32) if configured is not None else torch.ones(len(funcs))
    return (per_func * w).nansum(1)


def _fit(x: torch.Tensor, C: int) -> torch.Tensor:
    return x[:, :C] if x.shape[1] >= C else torch.cat([x, x.new_zeros(x.shape[0], C - x.shape[1])], 1)


def scored_batch(trainer, G: int, inputs: list[dict], out: dict, record: dict, tasks: Optional[torch.Tensor],
                 key: Hashable) -> tuple[dict, Truth]:
    """(the adapter's batch, the truth) of one generation batch TRL sampled and scored under
    :func:`recording_generation`: the truth from what the sampler recorded, never from `out`."""
    C = out["completion_ids"].shape[1]
    drawn = rescored = None
    if "sampler" in record:
        tokens, logp, owned = record["sampler"]
        if getattr(trainer, "mask_truncated_completions", False):
            # the trainer drops a completion the sampler cut at max_completion_length (no stop token
            # drawn) on purpose: none of its tokens is trained on. TRL counts one whose last drawn
            # token is the pad token as finished (`eos_and_pad`), so that one is kept
            last = tokens.gather(1, (record["drawn"] - 1).clamp(min=0)[:, None]).squeeze(1)
            ended = torch.isin(tokens, record["stop"]).any(1) | (last == tokenizer(trainer).pad_token_id)
            owned = owned * ended[:, None].to(owned.dtype)
        owned, logp = _fit(owned, C), _fit(logp, C)
        drawn = record["drawn"]             # counted from generate's output, not TRL's mask
        rescored = configured_rewards(trainer, inputs, tokens, record["stop"])
    else:                                  # vLLM: its log-probs of the sampled tokens
        logp = out.get("sampling_per_token_logps")
        owned = (~torch.isnan(logp)).float() if logp is not None else loss_mask(out)
        logp = torch.nan_to_num(logp) if logp is not None else torch.zeros_like(owned)
    # the rewards the batch's advantages were formed from: TRL's per-function scores weighted by
    # the weights its scoring multiplies (`self.reward_weights`, sum_then_normalize)
    rewards = (record["rewards_per_func"].float() * trainer.reward_weights.float()).nansum(1)
    batch = {"inputs": out, "raw": inputs, "generated": record["generated"], "per_func": record["rewards_per_func"],
             "trainer": trainer, "key": key}
    return batch, Truth(owned, logp, rewards, G, drawn=drawn, rescored=rescored, tasks=tasks)
