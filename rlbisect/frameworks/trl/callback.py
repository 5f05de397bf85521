"""A transformers TrainerCallback that feeds the spike detectors and saves replayable steps.

    from rlbisect.frameworks.trl.callback import SnapshotCallback
    trainer = GRPOTrainer(...)                      # or any transformers.Trainer
    trainer.add_callback(SnapshotCallback(trainer, "snapshots"))
    trainer.train()                                 # step-NNNNNN.pt written when a detector fires

    rlbisect replay snapshots/step-000003.pt --adapter my_adapter.py:make_adapter

Each optimizer step's statistics go to the detectors under rlbisect's names (`kl` -> `kl_ref`,
`clip_ratio/region_mean` -> `clip_frac`, ...), with what TRL does not log computed from the
log-probs its loss formed (`ratio_max`, `ratio_min`, `approx_kl`). A step is saved through
`SnapshotHook` (one safetensors file): the weights and optimizer state right before the
optimizer step, every micro-batch the step trained on, the RNG state. `replay_step` re-runs it
with the trainer's own `training_step`, gradient clipping and optimizer.

The step's micro-batches are read where the trainer hands them to its loss (HF Trainer's
`_prepare_inputs`; for GRPOTrainer that is after generation and scoring), so what is replayed is
the update alone: sampling is not re-run.
"""

from __future__ import annotations

import statistics
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from transformers import TrainerCallback

from rlbisect.metrics import METRICS
from rlbisect.steps.capture import diff_norm, optimizer_digest, state_digest
from rlbisect.steps.hook import SnapshotHook
from rlbisect.steps.replay import Replayed, ReplayError, UpdateRaised, restore
from rlbisect.steps.spike_rules import SpikeConfig

# TRL's metric names -> rlbisect's (rlbisect/metrics.py); only those the loss computes, so a replay
# recomputes them (the reward and completion lengths are the rollout's)
LOSS_METRICS = {"entropy": "entropy", "kl": "kl_ref", "clip_ratio/region_mean": "clip_frac",
                "cispo_clip_ratio": "clip_frac"}
assert set(LOSS_METRICS.values()) <= set(METRICS), "rlbisect's metric names live in rlbisect.metrics"
TRAINER_NAME = "transformers"     # the snapshot's `trainer`: a label, never an import path


@dataclass
class Window:
    """What one optimizer step consumed and measured."""

    micro: list[dict] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    seen: list = field(default_factory=list)              # (logps, old or None, mask, sampler or None) per loss
    grad_norm: float | None = None
    num_items: float | None = None                        # HF's num_items_in_batch for the window
    metrics_at: dict[str, int] = field(default_factory=dict)


def _is_grpo(trainer) -> bool:
    return hasattr(trainer, "_get_per_token_logps_and_entropies") and hasattr(trainer, "_compute_loss")


@contextmanager
def watching(trainer, window: Window, replaying: bool = False) -> Iterator[None]:
    """Instance patches that record the window: the micro-batches (HF Trainer._prepare_inputs'
    result), each training_step's loss, the pre-clip gradient norm (Trainer._clip_grad_norm),
    and for GRPOTrainer the log-probs and old log-probs its loss formed. ``replaying``: the
    micro-batches are given, so _prepare_inputs passes them through instead of generating."""
    from rlbisect.frameworks.trl._internals import patched
    prepare, step, clip = trainer._prepare_inputs, trainer.training_step, trainer._clip_grad_norm

    def recording_prepare(inputs):
        out = inputs if replaying else prepare(inputs)
        if not replaying:
            window.micro.append({k: v.detach().clone() for k, v in out.items() if isinstance(v, torch.Tensor)})
        return out

    def recording_step(model, inputs, num_items_in_batch=None):
        if num_items_in_batch is not None:     # a loss normalized over the whole window (HF Trainer)
            window.num_items = float(num_items_in_batch)
        loss = step(model, inputs, num_items_in_batch)
        window.losses.append(float(loss))
        return loss

    def recording_clip(model):
        norm = clip(model)
        window.grad_norm = float(norm)
        return norm

    extra: dict[str, Any] = {}
    if _is_grpo(trainer):
        compute, logps_fn = trainer._compute_loss, trainer._get_per_token_logps_and_entropies
        current: dict = {}

        def observed_compute(model, inputs):
            current["inputs"] = inputs
            return compute(model, inputs)

        def observed_logps(*args, **kwargs):
            out = logps_fn(*args, **kwargs)
            if "inputs" in current and out[0].requires_grad:
                from rlbisect.frameworks.trl._internals import loss_mask
                inp = current.pop("inputs")
                window.seen.append((out[0].detach(), inp.get("old_per_token_logps"), loss_mask(inp),
                                    inp.get(SAMPLER_KEY)))
            return out
        extra = {"_compute_loss": observed_compute, "_get_per_token_logps_and_entropies": observed_logps}
        if not replaying:
            extra["_generate_and_score_completions"] = _with_sampler_logps(trainer)
    with patched(trainer, _prepare_inputs=recording_prepare, training_step=recording_step,
                 _clip_grad_norm=recording_clip, **extra):
        yield


SAMPLER_KEY = "rlbisect_sampler_logp"   # rides in TRL's batch dict: shuffled and split with its rows


def _with_sampler_logps(trainer):
    """TRL's scoring with the sampler's log-probs recorded (HF generate's processed scores) and
    added to the batch it returns, so each micro-batch carries its own rows' sampler log-probs."""
    from rlbisect.frameworks.trl._sampling import recording_generation
    score = trainer._generate_and_score_completions

    def scoring(inputs):
        record: dict = {}
        with recording_generation(trainer, record):
            out = score(inputs)
        if "sampler" in record:
            logp, C = record["sampler"][1], out["completion_ids"].shape[1]
            out[SAMPLER_KEY] = logp[:, :C] if logp.shape[1] >= C else \
                torch.cat([logp, logp.new_zeros(logp.shape[0], C - logp.shape[1])], 1)
        return out
    return scoring


def _gap_stats(seen: list) -> dict[str, float]:
    """logp_gap (mean |sampler - trainer| on trained tokens, averaged over micro-steps) and its max,
    against the log-probs the trainer treats as the sampling policy's: its old ones, else the current."""
    gaps, top = [], 0.0
    for logp, old, mask, sampler in seen:
        if sampler is None or not (mask > 0).any():
            continue
        diff = ((logp if old is None else old) - sampler).abs()[mask > 0]
        gaps.append(float(diff.mean()))
        top = max(top, float(diff.max()))
    return {"logp_gap": statistics.fmean(gaps), "logp_gap_max": top} if gaps else {}


def _metric_lists(trainer) -> dict[str, list]:
    return getattr(trainer, "_metrics", {}).get("train", {})


def step_stats(trainer, window: Window) -> dict[str, float]:
    """One step's statistics under rlbisect's names, computed the same way live and in replay."""
    stats: dict[str, float] = {"loss": sum(window.losses)}
    if window.grad_norm is not None:
        stats["grad_norm"] = window.grad_norm
    lists = _metric_lists(trainer)
    for key, name in LOSS_METRICS.items():
        new = lists.get(key, [])[window.metrics_at.get(key, 0):]
        if new:
            stats[name] = statistics.fmean(new)
    if window.seen:
        from rlbisect.frameworks.trl._internals import ratio_stats
        stats.update(ratio_stats([entry[:3] for entry in window.seen]))
        stats.update(_gap_stats(window.seen))
    return stats


def _flatten(micro: list[dict]) -> dict[str, torch.Tensor]:
    return {f"m{i}/{k}": v for i, m in enumerate(micro) for k, v in m.items()}


def _unflatten(batch: dict[str, torch.Tensor]) -> list[dict]:
    micro: dict[int, dict] = {}
    for key, v in batch.items():
        head, _, name = key.partition("/")
        if not (head.startswith("m") and head[1:].isdigit() and name):
            raise ReplayError(f"batch key {key!r} is not a micro-batch tensor (m<i>/<name>)")
        micro.setdefault(int(head[1:]), {})[name] = v.clone()
    return [micro[i] for i in sorted(micro)]


class SnapshotCallback(TrainerCallback):
    """Detectors on every optimizer step of a transformers/TRL Trainer; a replayable file when one fires.

    trainer     the Trainer this callback is added to (its methods are observed, not changed)
    directory, every, keep_last, max_snapshots, config, meta   as for `SnapshotHook`
    detectors   a SpikeConfig; default: SpikeConfig.for_trainer(optimizer steps per sampled batch)
    """

    def __init__(self, trainer, directory, *, every: int | None = None, detectors: SpikeConfig | None = None,
                 config: dict | None = None, **hook_options) -> None:
        self.trainer = trainer
        if detectors is None:
            from rlbisect.frameworks.trl._internals import steps_per_batch
            detectors = SpikeConfig.for_trainer(steps_per_batch(trainer) if _is_grpo(trainer) else 2)
        cfg = {"trainer": TRAINER_NAME, "trainer_class": type(trainer).__name__,
               "loss_type": getattr(trainer, "loss_type", None), **(config or {})}
        self.hook = SnapshotHook(directory, every=every, detectors=detectors, config=cfg, **hook_options)
        self.hits: list = []
        self._window: Window | None = None
        self._watch: AbstractContextManager[None] | None = None
        self._rng: Any = None    # the generators at the step's start (RngState)

    def on_train_begin(self, args, state, control, **kwargs):
        self._watch = None

    def on_step_begin(self, args, state, control, **kwargs):
        from rlbisect.steps.capture import capture_rng
        self._close()
        self._rng = capture_rng()    # before the step's forward passes: dropout draws from it
        self._window = Window(metrics_at={k: len(v) for k, v in _metric_lists(self.trainer).items()})
        self._watch = watching(self.trainer, self._window)
        self._watch.__enter__()

    def on_pre_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        # gradients are in, weights and optimizer state are still those before the step
        w = self._window
        if w is not None and model is not None:
            self.hook.meta["accumulation"] = len(w.micro)
            self.hook.meta["num_items_in_batch"] = w.num_items
            # the gradients held now are this step's own, which the replay recomputes
            self.hook.before_update(state.global_step, model, optimizer, _flatten(w.micro), keep_grads=False,
                                    rng=self._rng)

    def on_step_end(self, args, state, control, **kwargs):
        w = self._window
        self._close()
        if w is not None and self.hook._pending is not None:
            self.hits += self.hook.after_update(state.global_step - 1, step_stats(self.trainer, w))

    def on_train_end(self, args, state, control, **kwargs):
        self._close()

    def _close(self) -> None:
        if self._watch is not None:
            self._watch.__exit__(None, None, None)
            self._watch = None


def replay_step(trainer, model: torch.nn.Module, snap) -> Replayed:
    """Re-run a step a SnapshotCallback saved: restore `model` (a fresh copy of the trainer's
    policy), a fresh optimizer from the trainer's args with the saved state, the RNG; then the
    trainer's own training_step on each saved micro-batch, its clipping and optimizer step."""
    from rlbisect.frameworks.trl._internals import optimizer as fresh_optimizer, patched
    micro = _unflatten(snap.batch)
    if not micro:
        raise ReplayError("the snapshot holds no micro-batches")
    opt = fresh_optimizer(trainer, model)
    trainer.model.train()     # as HF's training loop leaves it: TRL's loss normalizes by mode
    try:
        restore(snap, model, opt, {})
    except (RuntimeError, ValueError, KeyError) as e:
        raise ReplayError(f"the snapshot's state does not fit this trainer: {e}".splitlines()[0]) from None
    window = Window(metrics_at={k: len(v) for k, v in _metric_lists(trainer).items()})
    accumulation = int(snap.meta.get("accumulation", len(micro)))
    items = snap.meta.get("num_items_in_batch")
    num_items = None if items is None else torch.tensor(int(items) if float(items).is_integer() else items)
    step = getattr(trainer, "_step", None)
    try:
        with patched(trainer, current_gradient_accumulation_steps=accumulation), watching(trainer, window, True):
            for inputs in micro:
                trainer.training_step(model, inputs, num_items)
            if trainer.args.max_grad_norm and trainer.args.max_grad_norm > 0:
                trainer._clip_grad_norm(model)
            opt.step()
            opt.zero_grad()
    except ReplayError:
        raise
    except Exception as e:
        raise UpdateRaised(f"{type(e).__name__}: {e}".splitlines()[0]) from e
    finally:
        if step is not None:
            trainer._step = step
    after = model.state_dict()
    return Replayed(step_stats(trainer, window), state_digest(after), diff_norm(after, snap.model),
                    diff_norm(after, snap.post_update) if snap.post_update is not None else None,
                    post_optimizer_sha256=optimizer_digest(opt))
