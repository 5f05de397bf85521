"""Short runs of GRPOTrainer's own `train()` for rlbisect's run-level checks (rlbisect.check.run_level),
and what that loop means to do, read from its TrainingArguments.

    train_run(adapter, steps, seed, eval_every, tap=None, settings=None) -> logged rows
        a fresh trainer from the adapter's factory (the same fault, these settings; the adapter's
        own while nothing has run it: `GRPOAdapter.spare`), `max_steps` = steps, `seed` = seed,
        trained by `trainer.train()`; ``tap`` (rlbisect.check.observe) sees "sampled" per
        generation batch (wrapping `_generate_and_score_completions`: the sampler's
        record as in the probe batch) and "loss" per `_compute_loss` (`_internals.observing`); the
        optimizer steps are seen by torch's global hook. The demo has no eval dataset: there is no
        evaluation to show (the evaluation checks say n/a), and ``eval_every`` changes nothing.
    run_spec(adapter, steps, settings=None) -> RunSpec
        HF Trainer's optimizer (`optim`, learning rate, Adam betas and epsilon), its scheduler
        (`lr_scheduler_type`, warmup: `get_warmup_steps`), `max_grad_norm`, and the dataset's ids.
"""

from __future__ import annotations

import contextlib
import gc
import io
from typing import Any, Optional

import torch

from rlbisect.check.spec import RunSpec, Schedule
from rlbisect.frameworks.trl import _internals as trl_, _sampling
from rlbisect.frameworks.trl._internals import loss_mask

# loss types whose `_compute_loss` divides the micro-batch's loss by `current_gradient_accumulation_steps`
# (TRL 1.16): the tap is shown it times that, the micro-batch's own loss (check 6 checks the divide)
GA_DIVIDED = {"grpo", "bnpo", "dr_grpo", "luspo", "sapo"}
#: TrainingArguments.optim -> the torch.optim class HF Trainer builds for it
OPTIMIZERS = {"adamw_torch": "AdamW", "adamw_torch_fused": "AdamW", "adamw_hf": "AdamW", "sgd": "SGD",
              "adagrad": "Adagrad", "rmsprop": "RMSprop"}
#: TrainingArguments.lr_scheduler_type -> the declared schedule's kind (HF warms up from 0)
SCHEDULES = {"linear": "linear", "cosine": "cosine", "constant": "constant", "constant_with_warmup": "constant"}


def _shown_loss(trainer):
    """The loss the tap is shown for each micro-batch: the micro-batch's own loss. TRL's, times the
    accumulation it divided by (GA_DIVIDED; check 6 checks that divide); for the loss types it
    normalizes by the window's token count (dapo, cispo, vespo: `num_items_in_batch *
    current_gradient_accumulation_steps / steps_per_generation`), rescaled by that normalizer to
    the micro-batch's token mean (the normalizer itself is checked at step 0: checks 6 and 19)."""
    def shown(loss, inputs):
        ga = trainer.current_gradient_accumulation_steps
        if trainer.loss_type in GA_DIVIDED:
            return loss * ga
        norm = inputs["num_items_in_batch"].clamp(min=1.0) / trainer.accelerator.num_processes
        return loss * (norm * ga / trainer.args.steps_per_generation) / loss_mask(inputs).sum().clamp(min=1.0)
    return shown


def _normalizer(trainer):
    """The token count a token-summed loss (not GA_DIVIDED: dapo, cispo, vespo) divides by, as TRL
    stored it with the generation batch (`num_items_in_batch`, per process): the tap compares it
    with the tokens the sampler's record says are trained on (huggingface/trl#6369 counted the
    completions `mask_truncated_completions` drops). None for the loss types that do not use it."""
    def stated(inputs):
        if trainer.loss_type in GA_DIVIDED or "num_items_in_batch" not in inputs:
            return None
        return float(inputs["num_items_in_batch"]) / trainer.accelerator.num_processes
    return stated


@contextlib.contextmanager
def _sampled_shown(adapter, tap):
    """`tap("sampled", ...)` for every generation batch the loop scores, and a row index riding
    TRL's shuffle and split so each `_compute_loss` knows its rows."""
    tr = adapter.trainer
    score = tr._generate_and_score_completions   # the instance's own (a fault's wrapper included)

    def shown(inputs):
        record: dict = {}
        with _sampling.recording_generation(tr, record):
            out = score(inputs)
        ids = [x.get("id") for x in inputs]
        tasks = torch.tensor(ids) if all(isinstance(i, int) for i in ids) else None
        batch, truth = _sampling.scored_batch(tr, adapter.G, inputs, dict(out), record, tasks, adapter._key)
        tap("sampled", step=tr.state.global_step, model=trl_.unwrapped(tr), batch=batch, truth=truth)
        out[trl_.ROW] = torch.arange(len(out["advantages"]))
        return out
    with trl_.patched(tr, _generate_and_score_completions=shown):
        yield


def train_run(adapter, steps: int, seed: int, eval_every: int, tap=None, settings: Optional[dict] = None) -> list[dict]:
    # a fresh trainer (training moves its weights): the adapter's own while nothing has run it
    run = (not settings and adapter.spare()) or adapter.with_settings(**(settings or {}))
    adapter.__dict__.setdefault("_runs", {})[repr(sorted((settings or {}).items()))] = run   # for run_spec
    tr = run.trainer
    tr.args.max_steps, tr.args.seed, tr.args.logging_steps = steps, seed, 1
    with contextlib.ExitStack() as stack:
        if tap is not None:
            stack.enter_context(_sampled_shown(run, tap))
            stack.enter_context(trl_.observing(tr, [], tap, _shown_loss(tr), _normalizer(tr)))
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))     # HF's progress prints
        # HF's train() starts with accelerator.free_memory(), whose gc.collect() costs ~0.6 s in a
        # process holding torch, more than a few tiny steps: it frees memory and moves no number
        stack.enter_context(trl_.patched(gc, collect=lambda generation=2: 0))
        tr.train()
    # the per-step rows HF logged (the summary row at the end has no loss)
    return [dict(row) for row in tr.state.log_history if "loss" in row]


def run_spec(adapter, steps: int, settings: Optional[dict] = None) -> RunSpec:
    built = adapter.__dict__.get("_runs", {}).get(repr(sorted(settings.items()))) if settings else adapter
    args = (built or adapter.with_settings(**(settings or {}))).trainer.args
    kind: Any = SCHEDULES.get(str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)))
    if kind is None:
        raise ValueError(f"lr_scheduler_type {args.lr_scheduler_type} has no rlbisect.check.spec.Schedule")
    hyper: dict[str, Any] = {"betas": (args.adam_beta1, args.adam_beta2), "eps": args.adam_epsilon}
    if not args.weight_decay:        # HF keeps biases and norms out of weight decay: one value only when 0
        hyper["weight_decay"] = 0.0
    optim = str(getattr(args.optim, "value", args.optim))
    data = adapter.trainer.train_dataset
    ids = frozenset(data["id"]) if "id" in data.column_names else None
    return RunSpec(optimizer=OPTIMIZERS.get(optim, optim), lr=args.learning_rate, hyper=hyper,
                   schedule=Schedule(kind=kind, warmup=args.get_warmup_steps(steps), total=steps, warmup_from_zero=True),
                   max_grad_norm=args.max_grad_norm or None, train_tasks=ids, heldout_tasks=None, optimizer_steps=steps)
