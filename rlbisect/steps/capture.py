"""Taking a step's state out of a live training loop: tensor copies, RNG states, digests.

Everything here works on live objects (modules, optimizers, generators); the file format lives
in `format.py`, the code's git identity in `rlbisect.git.repo`, putting state back and comparing it in
`replay.py`.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import random
from collections.abc import Mapping
from typing import Any, cast

import numpy as np
import torch

from rlbisect.errors import describe
from rlbisect.steps.format import RngState, Snapshot
from rlbisect.steps.trees import encode_tree


def plain_stats(stats: Mapping[str, Any]) -> dict[str, Any]:
    """Logged values as JSON-able Python numbers (one-element tensors and arrays, numpy scalars included)."""
    out: dict[str, Any] = {}
    for k, v in stats.items():
        if (isinstance(v, torch.Tensor) and v.numel() == 1) or (isinstance(v, np.ndarray) and v.size == 1):
            v = v.item()
        if isinstance(v, numbers.Integral) and not isinstance(v, bool):
            v = int(v)
        elif isinstance(v, numbers.Real) and not isinstance(v, bool):
            v = float(v)
        out[str(k)] = v
    return out


def capture_rng(generators: dict[str, torch.Generator] | None = None) -> RngState:
    # numpy's global generator too: an update that draws from np.random replays only with it; CUDA's
    # (dropout on a GPU) only once CUDA is in use, since asking would initialise it
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    return RngState(torch.get_rng_state(), {n: g.get_state() for n, g in (generators or {}).items()},
                    random.getstate(), cast(tuple, np.random.get_state(legacy=True)), cuda)


def copy_tensors(obj: Any) -> Any:
    """Deep copy of a nested dict/list/tuple, cloning tensors (a state_dict only holds references)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: copy_tensors(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(copy_tensors(v) for v in obj)
    return obj


def capture(step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
            batch: dict[str, torch.Tensor], generators: dict[str, torch.Generator] | None = None,
            keep_grads: bool = True, scheduler: Any = None, rng: RngState | None = None, **fields: Any) -> Snapshot:
    """Clone the pre-update state in memory (no disk I/O, no device sync); `fields` fill the rest.

    Gradients the parameters still hold are state too: a loop that never clears them (or
    accumulates across the step boundary) adds them into this update, and its replay must as well.
    ``keep_grads=False`` where the call comes after the step's own backward (its gradients are
    the update's, which the replay recomputes). ``scheduler``: one the update steps itself; a
    state that cannot be stored (an object in it) is left out and named in ``meta``. ``rng``: the
    generators as taken before the update's first draw, by a caller that comes after it.
    """
    try:   # a scheduler is optional evidence: one without a storable state_dict is named, not fatal
        sched = None if scheduler is None else copy_tensors(scheduler.state_dict())
        encode_tree(sched, {}, "sched")
    except Exception as e:  # noqa: BLE001 - any object may be passed as a scheduler
        fields["meta"] = {**fields.get("meta", {}), "scheduler_not_kept": describe(e)}
        sched = None
    return Snapshot(scheduler=sched, step=step, model=copy_tensors(model.state_dict()),
                    optimizer=None if optimizer is None else copy_tensors(optimizer.state_dict()),
                    batch=copy_tensors(dict(batch)), rng=rng or capture_rng(generators),
                    grads={n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
                    if keep_grads else None,
                    **fields)


def state_digest(state: torch.nn.Module | dict[str, torch.Tensor]) -> str:
    """sha256 over names, dtypes, shapes and bytes of a state dict: equal iff bit-identical."""
    if isinstance(state, torch.nn.Module):
        state = state.state_dict()
    h = hashlib.sha256()
    for name, t in state.items():
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def optimizer_digest(optimizer: torch.optim.Optimizer) -> str | None:
    """sha256 of the optimizer's per-parameter state (Adam's moments, step counts): equal iff
    bit-identical; None when the state holds a value it cannot read (then nothing is compared).
    The param groups (learning rates) are left out: a scheduler stepped after the update, outside
    what a replay re-runs, changes them."""
    tensors: dict[str, torch.Tensor] = {}
    try:
        tree = encode_tree(optimizer.state_dict()["state"], tensors, "state")
    except ValueError:
        return None
    return hashlib.sha256((json.dumps(tree) + state_digest(tensors)).encode()).hexdigest()


def fingerprint(module: torch.nn.Module) -> list[float]:
    """A cheap stand-in for `state_digest`, taken every step of a module that must not change:
    per tensor, the float64 sum of at most ~4096 evenly strided elements. Reloading other weights
    changes it; an untouched module never does (same bits, same sums)."""
    with torch.no_grad():
        sums = [t.detach().reshape(-1)[:: max(1, t.numel() // 4096)].double().sum()
                for t in module.state_dict().values() if t.numel()]
        return torch.stack(sums).cpu().tolist() if sums else []


def diff_norm(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float | None:
    """||a - b|| over the floating-point tensors both hold (float64 sums); None if there are none."""
    sq = [(a[k].detach().double() - v.detach().double()).pow(2).sum()
          for k, v in b.items() if v.is_floating_point() and k in a and a[k].shape == v.shape]
    return math.sqrt(float(sum(sq))) if sq else None
