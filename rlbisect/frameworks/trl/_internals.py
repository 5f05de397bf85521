"""Every reach into TRL's private GRPOTrainer API, in one place, each naming the TRL code it mirrors.

Read against TRL 1.16.0 (trl/trainer/grpo_trainer.py). Nothing here is pinned to a version: the
adapter asks :func:`missing` which of the members below this TRL lacks (feature detection), and the
optional ones are read with `getattr` defaults (a setting a release lacks is off in that release).
When TRL moves, this file is what to re-read: the names below are private and change between releases.
"""

from __future__ import annotations

import types
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, cast

import torch

READ = "1.16.0"   # the TRL these mirrors were read against; a newer one is tried, with a warning
#: the private members every probe point needs: without one of them the adapter cannot run
NEEDS = ("_generate_and_score_completions", "_compute_loss", "_get_per_token_logps_and_entropies",
         "_generate", "_calculate_rewards", "_prepare_inputs", "training_step", "create_optimizer")


def missing(trainer) -> list[str]:
    """The members of :data:`NEEDS` this trainer lacks (feature detection, not a version pin)."""
    return [name for name in NEEDS if not callable(getattr(trainer, name, None))] + \
        [name for name in ("reward_weights", "num_generations", "loss_type") if not hasattr(trainer, name)]


def imported_version(trl) -> str:
    """The imported TRL's version. A source checkout (a `VERSION` file beside `pyproject.toml` above
    the package, TRL since Aug 2025) says it there: its `__version__` reads the *installed*
    distribution's metadata, which is another TRL when a checkout goes first on PYTHONPATH."""
    root = Path(trl.__file__).resolve().parents[1]
    if (root / "VERSION").is_file() and (root / "pyproject.toml").is_file():
        text = (root / "VERSION").read_text(encoding="utf-8", errors="replace").strip()
        if text and len(text) < 40 and "\n" not in text:
            return text
    return str(getattr(trl, "__version__", "unknown"))


def require_trl(trainer=None) -> str:
    """The version of the TRL actually imported (`trl.__version__` of the module, which may be a
    checkout on PYTHONPATH; never installed metadata). A release newer than the one `_internals.py`
    was read against is tried, with a warning; a trainer lacking a member every probe point needs
    is a clear "cannot run" error (feature detection, not a version pin)."""
    try:
        import huggingface_hub.constants as hub
        import trl
    except ImportError:
        raise ImportError("rlbisect.frameworks.trl.adapter needs TRL: pip install 'rlbisect[trl]'") from None
    # the checks fork beside the trainer: a child building a trainer waited forever on the telemetry
    # queue's lock, held by the parent's telemetry thread at the fork (a check sends nothing anyway)
    hub.HF_HUB_DISABLE_TELEMETRY = True
    from packaging.version import InvalidVersion, Version
    version = imported_version(trl)
    try:
        newer = Version(version).release[:2] > Version(READ).release[:2]
    except InvalidVersion:
        newer = True
    if newer:
        warnings.warn(f"TRL {version} is newer than {READ}, which rlbisect's reaches into GRPOTrainer "
                      "were read against: trying it (a check whose member is gone says n/a)", stacklevel=2)
    if gone := missing(trainer) if trainer is not None else []:
        raise RuntimeError(f"rlbisect cannot run on TRL {version}: its GRPOTrainer lacks {', '.join(gone)}, "
                           "which every probe point needs (rlbisect/frameworks/trl/_internals.py)")
    return version


def eos_ids(trainer) -> list[int]:
    """The stop tokens TRL cuts completions at: `eos_token_ids` (a list, TRL >= 1.16), else the
    tokenizer's one `eos_token_id` (earlier releases)."""
    ids = getattr(trainer, "eos_token_ids", None)
    if ids is None:
        ids = [getattr(trainer, "eos_token_id", None) or tokenizer(trainer).eos_token_id]
    return [int(i) for i in ids]


def tokenizer(trainer):
    """The text tokenizer (`_tokenizer` since TRL 1.x grew processors; `processing_class` before)."""
    return getattr(trainer, "_tokenizer", None) or trainer.processing_class


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


def score(trainer, inputs: list[dict]) -> dict:
    """TRL's own sampling and scoring of one generation batch (`_generate_and_score_completions`,
    the step `_prepare_inputs` runs every `steps_per_generation * num_iterations` micro-steps)."""
    unwrapped(trainer).train()       # its `mode` is "train" iff the model is in training mode
    return trainer._generate_and_score_completions(inputs)


def scored_again(trainer, inputs: list[dict], generated: tuple, per_func: torch.Tensor) -> dict:
    """`_generate_and_score_completions` on completions another trainer generated (`_generate`'s
    return) with their per-function rewards: everything TRL stores with a batch (old and reference
    log-probs, masks, advantages) computed by this trainer, at its settings."""
    with patched(trainer, _generate=lambda prompts: generated, _calculate_rewards=lambda *a, **k: per_func):
        return score(trainer, inputs)


@contextmanager
def as_policy(trainer, model) -> Iterator[None]:
    """`model` scored as the trainer scores its policy. TRL with a fused LM head bakes the temperature
    into each model's `forward` at construction (`add_fused_lm_head(model, temperature=...)`, once
    for the policy, once for `ref_model`): the policy's forward function is bound to `model` for the
    duration, so a reference or a copy is scored at the policy's temperature, never at one its own
    construction chose. Without a patched forward (older TRL divides the logits in
    `_get_per_token_logps_and_entropies`) there is nothing to bind."""
    policy = unwrapped(trainer)
    forward = policy.__dict__.get("forward")
    if model is policy or not isinstance(forward, types.MethodType) or type(model) is not type(policy):
        yield
        return
    with patched(model, forward=types.MethodType(forward.__func__, model)):
        yield


def per_token_logps(trainer, model, inputs: dict, grad: bool = False) -> torch.Tensor:
    """`_get_per_token_logps_and_entropies` as `_compute_loss` calls it: log pi(completion token)
    at every completion position, [B, C], temperature and fused LM head as training has them."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    with torch.set_grad_enabled(grad), as_policy(trainer, model):
        logps = trainer._get_per_token_logps_and_entropies(
            model, ids, attn, inputs["completion_ids"].size(1),
            batch_size=trainer.args.per_device_train_batch_size)[0]   # (logps, entropies[, aux]) by release
    return logps


def loss_mask(inputs: dict) -> torch.Tensor:
    """The mask `_compute_loss` trains on: completion_mask, times tool_mask when tools ran."""
    m = inputs["completion_mask"]
    return (m * inputs["tool_mask"] if "tool_mask" in inputs else m).float()


# a key the adapter adds to a generation batch before TRL's shuffle and split, so each micro-batch
# knows which probe rows it holds; taken out again before `_compute_loss` sees the inputs
ROW = "_rlbisect_row"


@contextmanager
def observing(trainer, seen: list, tap=None, shown_loss: Callable = lambda loss, inputs: loss,
              normalizer: Callable = lambda inputs: None) -> Iterator[None]:
    """`_compute_loss` and `_get_per_token_logps_and_entropies` observed, to read the ratio the loss
    formed (TRL logs only clip fractions): `seen` gets (logps, old or None, mask) per call, and
    `tap("loss", rows=, mask=, old_logp=, advantages=, ref_logp=, logp=, entropy=, loss=)` (if given,
    rlbisect.check.observe) is shown, after each call on a micro-batch that carries `ROW`, what it
    was handed: its mask (`completion_mask * tool_mask`), the old log-probs it uses
    (`inputs["old_per_token_logps"]`, or when absent its fallback `per_token_logps.detach()`),
    `inputs["advantages"]`, `inputs["ref_per_token_logps"]` as TRL stored them (when its KL term is
    on), its log-probs `per_token_logps` and `entropies` (both still on the graph: a loss that uses
    entropies it should not shows), `shown_loss(its loss, inputs)` and
    `normalizer(inputs)`: the token count its loss divides by, stated for the generation batch.
    Read at `_compute_loss`, i.e. after `compute_loss` and anything a subclass does there; the model
    is scored as the trainer's policy (:func:`as_policy`)."""
    compute, logps_fn = trainer._compute_loss, trainer._get_per_token_logps_and_entropies
    current: dict[str, Any] = {}

    def observed_compute(model, inputs):
        rows = inputs.get(ROW)
        inputs = {k: v for k, v in inputs.items() if k != ROW}
        current.clear()
        current["inputs"] = inputs
        with as_policy(trainer, model):
            loss = compute(model, inputs)
        logp, old, entropy = current.pop("logp", None), inputs.get("old_per_token_logps"), current.pop("entropy", None)
        current.clear()
        if logp is not None:
            seen.append((logp.detach(), old, loss_mask(inputs)))
            if tap is not None and rows is not None:
                tap("loss", rows=rows, mask=loss_mask(inputs), old_logp=logp.detach() if old is None else old,
                    advantages=inputs["advantages"], logp=logp, loss=shown_loss(loss, inputs),
                    ref_logp=inputs.get("ref_per_token_logps") if trainer.beta != 0.0 else None,
                    normalizer=normalizer(inputs), entropy=entropy)
        return loss

    def observed_logps(*args, **kwargs):
        out = logps_fn(*args, **kwargs)
        if "inputs" in current and "logp" not in current and out[0].requires_grad:
            current["logp"], current["entropy"] = out[0], out[1]   # the first with a graph: the policy's
        return out

    with patched(trainer, _compute_loss=observed_compute, _get_per_token_logps_and_entropies=observed_logps):
        yield


@contextmanager
def one_window(trainer, accumulation: int, beta: float, seen: list, tap=None) -> Iterator[None]:
    """The trainer set up for one optimizer window of `accumulation` micro-batches, observed.

    - `current_gradient_accumulation_steps` is what `_compute_loss` divides by (set by HF
      Trainer's loop; TRL sets `loss_is_scaled_for_ga = True` so HF does not divide again);
    - `args.steps_per_generation` set to the same number, so the dapo/cispo/vespo normalizer
      (`num_items_in_batch * current_gradient_accumulation_steps / steps_per_generation`) is the
      window's token count: the window plays one whole generation batch;
    - `beta` (0 for the loss without its KL term);
    - `_prepare_inputs` made the identity, so `training_step` trains on the batch given instead of
      generating (GRPOTrainer._prepare_inputs buffers and generates);
    - :func:`observing`, the tap shown the loss only when one micro-batch is the window.
    """
    spg = trainer.args.steps_per_generation
    unwrapped(trainer).train()        # `_compute_loss` normalizes and logs by the trainer's mode
    try:
        trainer.args.steps_per_generation = accumulation
        with patched(trainer, current_gradient_accumulation_steps=accumulation, beta=beta,
                     _prepare_inputs=lambda batch: batch), \
                observing(trainer, seen, tap, lambda loss, inputs: loss if accumulation == 1 else None):
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


def one_pass_loss(trainer, model, inputs: dict) -> torch.Tensor:   # training_step without the backward
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
    fallback, the current ones, ratio 1). In float64: at lr 1e-6 a step moves a log-prob by ~1e-5,
    and in float32 (r - 1) - log r cancels to 0, which check 7 reads as old_logp not frozen."""
    hi, lo, kls = 1.0, 1.0, []
    for logp, old, mask in seen:
        log_r = (logp.double() - (logp if old is None else old).double()) * mask
        r = log_r.exp()
        on = mask > 0
        if on.any():
            hi, lo = max(hi, float(r[on].max())), min(lo, float(r[on].min()))
            kls.append(float((((r - 1) - log_r) * mask).sum() / mask.sum()))
    return {"ratio_max": hi, "ratio_min": lo, "approx_kl": sum(kls) / len(kls) if kls else 0.0}
