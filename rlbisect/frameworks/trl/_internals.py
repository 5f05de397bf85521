"""Every reach into TRL's private GRPOTrainer API, in one place, each naming the TRL code it mirrors.

Written against TRL 1.16.0 (trl/trainer/grpo_trainer.py). `rlbisect.frameworks.trl.adapter` refuses other
versions (`TESTED`) rather than run these against code they were not read against. When TRL moves,
this file is what to re-read: the names below are private and change between releases.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, cast

import torch

TESTED = ("1.16.0", "1.17.0")    # [first, last): the TRL versions these mirrors were read against


def unwrapped(trainer) -> torch.nn.Module:
    return trainer.accelerator.unwrap_model(trainer.model)


@contextmanager
def patched(obj, **attrs) -> Iterator[None]:
    """Instance attributes set for the duration (shadowing methods too), restored after."""
    saved = {k: obj.__dict__[k] for k in attrs if k in obj.__dict__}
    for k, v in attrs.items():
        setattr(obj, k, v)
    try:
        yield
    finally:
        for k in attrs:
            if k in saved:
                setattr(obj, k, saved[k])
            else:
                try:
                    delattr(obj, k)          # back to the class attribute / method
                except AttributeError:
                    pass


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
    eos = torch.tensor(list(trainer.eos_token_ids))

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
    from trl.trainer.utils import is_async_callable
    funcs = trainer.reward_funcs
    if trainer.environment_factories is not None or \
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


def score(trainer, inputs: list[dict]) -> dict:
    """TRL's own sampling and scoring of one generation batch (`_generate_and_score_completions`,
    the step `_prepare_inputs` runs every `steps_per_generation * num_iterations` micro-steps)."""
    unwrapped(trainer).train()       # its `mode` is "train" iff the model is in training mode
    return trainer._generate_and_score_completions(inputs)


def rescore(trainer, inputs: list[dict], generated: tuple, rewards: torch.Tensor) -> dict:
    """`_generate_and_score_completions` again on the same completions, with other rewards: its
    advantage code (group mean/std, scale_rewards, multi_objective_aggregation) runs as in training."""
    w = trainer.reward_weights.float()
    per_func = torch.full((len(rewards), len(w)), float("nan"))
    per_func[:, 0] = rewards.float() / w[0]      # nansum over functions gives back `rewards`
    with patched(trainer, _generate=lambda prompts: generated, _calculate_rewards=lambda *a, **k: per_func):
        return score(trainer, inputs)


def per_token_logps(trainer, model, inputs: dict, grad: bool = False) -> torch.Tensor:
    """`_get_per_token_logps_and_entropies` as `_compute_loss` calls it: log pi(completion token)
    at every completion position, [B, C], temperature and fused LM head as training has them."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    with torch.set_grad_enabled(grad):
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            model, ids, attn, inputs["completion_ids"].size(1),
            batch_size=trainer.args.per_device_train_batch_size)
    return logps


def loss_mask(inputs: dict) -> torch.Tensor:
    """The mask `_compute_loss` trains on: completion_mask, times tool_mask when tools ran."""
    m = inputs["completion_mask"]
    return (m * inputs["tool_mask"] if "tool_mask" in inputs else m).float()


# a key the adapter adds to a generation batch before TRL's shuffle and split, so each micro-batch
# knows which probe rows it holds; taken out again before `_compute_loss` sees the inputs
ROW = "_rlbisect_row"


@contextmanager
def one_window(trainer, accumulation: int, beta: float, seen: list, tap=None) -> Iterator[None]:
    """The trainer set up for one optimizer window of `accumulation` micro-batches.

    - `current_gradient_accumulation_steps` is what `_compute_loss` divides by (set by HF
      Trainer's loop; TRL sets `loss_is_scaled_for_ga = True` so HF does not divide again);
    - `args.steps_per_generation` set to the same number, so the dapo/cispo/vespo normalizer
      (`num_items_in_batch * current_gradient_accumulation_steps / steps_per_generation`) is the
      window's token count: the window plays one whole generation batch;
    - `beta` (0 for the loss without its KL term);
    - `_prepare_inputs` made the identity, so `training_step` trains on the batch given instead of
      generating (GRPOTrainer._prepare_inputs buffers and generates);
    - `_compute_loss` and `_get_per_token_logps_and_entropies` observed, to read the ratio the
      loss formed (TRL logs only clip fractions): `seen` gets (logps, old or None, mask) per call;
    - `tap("loss", rows=, mask=, old_logp=, advantages=, logp=)` (if given, rlbisect.check.observe)
      shown what `_compute_loss` is handed, for micro-batches that carry `ROW`: its mask
      (`completion_mask * tool_mask`), the
      old log-probs it uses (`inputs["old_per_token_logps"]`, or when absent its fallback
      `per_token_logps.detach()`, read from the log-prob call) and `inputs["advantages"]`. Read at
      `_compute_loss`, i.e. after `compute_loss` and anything a subclass does there.
    """
    compute, logps_fn = trainer._compute_loss, trainer._get_per_token_logps_and_entropies
    current: dict[str, Any] = {}

    def observed_compute(model, inputs):
        current["rows"] = inputs.get(ROW)
        inputs = {k: v for k, v in inputs.items() if k != ROW}
        current["inputs"] = inputs
        return compute(model, inputs)

    def observed_logps(*args, **kwargs):
        out = logps_fn(*args, **kwargs)
        if "inputs" in current and out[0].requires_grad:
            inp, rows = current.pop("inputs"), current.pop("rows")
            old = inp.get("old_per_token_logps")
            seen.append((out[0].detach(), old, loss_mask(inp)))
            if tap is not None and rows is not None:
                tap("loss", rows=rows, mask=loss_mask(inp), old_logp=out[0].detach() if old is None else old,
                    advantages=inp["advantages"], logp=out[0])
        return out

    spg = trainer.args.steps_per_generation
    unwrapped(trainer).train()        # `_compute_loss` normalizes and logs by the trainer's mode
    try:
        trainer.args.steps_per_generation = accumulation
        with patched(trainer, current_gradient_accumulation_steps=accumulation, beta=beta,
                     _prepare_inputs=lambda batch: batch, _compute_loss=observed_compute,
                     _get_per_token_logps_and_entropies=observed_logps):
            yield
    finally:
        trainer.args.steps_per_generation = spg


def training_step(trainer, model, inputs: dict) -> torch.Tensor:
    """HF Trainer.training_step through GRPOTrainer's override (its `_step` counter restored):
    compute_loss under the trainer's autocast context, then accelerator.backward."""
    step = trainer._step
    try:
        return trainer.training_step(model, inputs, None)
    finally:
        trainer._step = step


def one_pass_loss(trainer, model, inputs: dict) -> torch.Tensor:
    """`compute_loss` as `training_step` calls it, without the backward."""
    with trainer.compute_loss_context_manager():
        return trainer.compute_loss(model, inputs)


def shuffled_chunks(trainer, inputs: dict, seed: int) -> list[dict]:
    """`_prepare_inputs`'s split of a generation batch: shuffled (from the global generator, as
    TRL draws it; seeded here), then `steps_per_generation` equal chunks."""
    from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict
    torch.manual_seed(seed)
    shuffled = cast("dict[str, torch.Tensor | None]", shuffle_sequence_dict(inputs))   # TRL's own types disagree
    return split_tensor_dict(shuffled, trainer.args.steps_per_generation)


def optimizer(trainer, model: torch.nn.Module) -> torch.optim.Optimizer:
    """A fresh optimizer the way HF Trainer.create_optimizer builds one from the trainer's args
    (its class, learning rate, betas, weight-decay groups), for `model`, leaving the trainer's alone."""
    with patched(trainer, optimizer=None):
        return trainer.create_optimizer(model)


def clip_and_step(trainer, model, opt) -> float:
    """HF Trainer's optimizer step: clip to `max_grad_norm` through accelerate, step, zero."""
    norm = trainer.accelerator.clip_grad_norm_(model.parameters(), trainer.args.max_grad_norm) \
        if trainer.args.max_grad_norm else torch.tensor(float("nan"))
    opt.step()
    opt.zero_grad()
    return float(norm)


def steps_per_batch(trainer) -> int:
    """Optimizer steps per generation batch. `_generate_and_score_completions` computes no old
    log-probs exactly when `gradient_accumulation_steps % (steps_per_generation * num_iterations)
    == 0` (one step per batch: `_compute_loss` then uses the current log-probs, detached)."""
    return max(1, trainer.args.steps_per_generation * trainer.num_iterations
               // trainer.args.gradient_accumulation_steps)


def one_step_per_batch(trainer) -> bool:
    return trainer.args.gradient_accumulation_steps % (trainer.args.steps_per_generation * trainer.num_iterations) == 0


def ratio_stats(seen: list) -> dict:
    """ratio_max/min and approx_kl = mean over micro-steps of ((r - 1) - log r) on trained tokens,
    from the log-probs each `_compute_loss` formed and the old ones it was given (none: TRL's
    fallback, the current ones, ratio 1)."""
    hi, lo, kls = 1.0, 1.0, []
    for logp, old, mask in seen:
        log_r = (logp - (logp if old is None else old)) * mask
        r = log_r.exp()
        on = mask > 0
        if on.any():
            hi, lo = max(hi, float(r[on].max())), min(lo, float(r[on].min()))
            kls.append(float((((r - 1) - log_r) * mask).sum() / mask.sum()))
    return {"ratio_max": hi, "ratio_min": lo, "approx_kl": sum(kls) / len(kls) if kls else 0.0}
