"""verl's actor update as `TrainingWorker.train_mini_batch` runs it, on a plain module in this process.

One function, :func:`train_mini_batch`, is what the checks' updates, the short runs, the demo's
worker and the replay of a saved verl step all step through, so a replayed step takes the path the
recorded one took. :class:`DemoWorker` has the face of verl's `TrainingWorker` that the snapshot hook
(`snapshot.watch`) reads: `engine.module`, `engine.optimizer`, `engine.optimizer_config.clip_grad`,
`loss_fn` (`ppo_loss` bound to an `ActorConfig`) and `train_mini_batch(data)`.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Optional

import torch

from rlbisect.frameworks.verl import _internals as v
from rlbisect.metrics import FOREIGN, is_timing


def train_mini_batch(module: torch.nn.Module, optimizer, clip_grad: float, data, loss_fn: Callable,
                     logits_seen: Optional[list] = None) -> dict[str, list]:
    """verl's `TrainingWorker.train_mini_batch` (verl/workers/engine_workers.py) on one process:
    the mini-batch keys the trainer set are popped (mini_batch_size or num_mini_batch, epochs, seed,
    dataloader_kwargs), verl's iterator (`tensordict_utils.make_iterator`, seed + data-parallel rank
    0), `BaseEngine.train_batch` per mini-batch; each mini-batch's metrics appended as
    `_postprocess_output` leaves them (its micro-batches' losses summed, the pre-clip grad norm).
    ``logits_seen`` is the loss tap's list of the response logits, emptied after each mini-batch."""
    from verl.utils import tensordict_utils as tu
    rows = data.shape[0]
    size = tu.pop(data, key="mini_batch_size", default=None)
    count = tu.pop(data, key="num_mini_batch", default=None)
    if size is None:
        if not count or rows % count:
            raise ValueError(f"num_mini_batch={count} does not divide the batch of {rows} rows")
        size = rows // count
    epochs = tu.pop(data, key="epochs", default=1)
    seed = tu.pop(data, key="seed", default=42)
    kwargs = tu.pop(data, key="dataloader_kwargs", default={})
    out: dict[str, list] = {}
    for mini in tu.make_iterator(data, mini_batch_size=size, epochs=epochs, seed=seed, dataloader_kwargs=kwargs):
        result = v.train_batch(module, mini, loss_fn, optimizer, clip_grad, logits_seen)
        if logits_seen is not None:
            logits_seen.clear()
        metrics = dict(result["metrics"])
        metrics["loss"] = float(sum(float(x) for x in result["loss"]))
        for key, value in metrics.items():
            out.setdefault(key, []).append(value)
    return out


def scalar(value: Any) -> Optional[float]:
    """One number for a metric as verl returns it (a `Metric` aggregates itself; a list of numbers,
    or of lists per micro-batch, is averaged); None for what is not a number."""
    if hasattr(value, "aggregate"):
        value = value.aggregate()
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, (list, tuple)):
        parts = [scalar(x) for x in value]
        nums = [x for x in parts if x is not None]
        return sum(nums) / len(nums) if nums and len(nums) == len(parts) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def stats(metrics: dict[str, Any]) -> dict[str, float]:
    """One update's metrics as the detectors and a replay read them: rlbisect's names where verl's
    (with or without the trainer's "actor/" prefix) mean the same (`rlbisect.metrics.FOREIGN`),
    verl's own otherwise; memory and timing (`perf/`) left out: they do not reproduce. A
    non-finite value is kept: it is what a detector must see."""
    ours = FOREIGN["verl"]
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if key.startswith("perf/") or is_timing(key):
            continue
        number = scalar(value)
        if number is not None:
            out[ours.get(key if key.startswith("actor/") else f"actor/{key}", key)] = number
    return out


class _Engine:
    def __init__(self, module, optimizer, clip_grad: float):
        self.module, self.optimizer = module, optimizer
        self.optimizer_config = type("OptimConfig", (), {"clip_grad": clip_grad})()


class DemoWorker:
    """The demo's stand-in for verl's `TrainingWorker` (which needs Ray's worker setup and FSDP):
    the attributes the snapshot hook reads, and `train_mini_batch` running verl's code with
    `ppo_loss` bound to ``config``; ``tap`` (set by the caller) sees what each loss call consumed."""

    def __init__(self, module: torch.nn.Module, optimizer, clip_grad: float, config, rows_of: Callable):
        from verl.workers.utils.losses import ppo_loss
        self.engine = _Engine(module, optimizer, clip_grad)
        self.loss_fn = partial(ppo_loss, config=config)
        self.tap: Optional[Callable] = None
        self._rows_of = rows_of

    def train_mini_batch(self, data) -> dict[str, list]:
        e = self.engine
        logits: list = []
        fn = v.loss_function(self.loss_fn.keywords["config"], self.tap, self._rows_of, logits)
        return train_mini_batch(e.module, e.optimizer, e.optimizer_config.clip_grad, data, fn, logits)
