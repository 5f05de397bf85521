"""The probe points a trainer exposes to the invariant checker.

The checker never reimplements a trainer: it calls the trainer's own batch preparation, loss,
gradient accumulation, optimizer step and reference model through this Protocol, and compares
what comes back with an independent source of truth that the *sampler* recorded (`Truth`: which
positions the policy sampled, the log-probabilities it sampled them with, the rewards).

Shapes: B episodes; P positions per episode (for a causal LM, P = T - 1 next-token positions).
Everything the checker reads is a plain tensor; the trainer's own batch object is opaque to it.

Write an adapter once, in your repository or in a file outside its history, and point rlbisect at
it with `--adapter package.module:factory` or `--adapter path/to/file.py:factory`. The factory is
called with the keyword arguments it accepts among `episodes`, `seed`, `kl_coef` and `bug`.
A FILE.py adapter is run as a standalone module, with its own folder first on `sys.path` so it can
import the trainer modules beside it by absolute name (`import my_trainer`, not `from . import`).
See `reference_trainer/adapter.py` for a complete example and the README for a walk-through.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol, runtime_checkable

import torch


@dataclass
class Truth:
    """What the sampler recorded, independently of the trainer's batch code."""

    owned: torch.Tensor        # [B, P] 1.0 where the policy sampled the target token
    sample_logp: torch.Tensor  # [B, P] the sampler's log-prob of that token (anything elsewhere)
    rewards: torch.Tensor      # [B]
    group_size: int            # rows are laid out group by group: [g0 x G, g1 x G, ...]


@dataclass
class Prepared:
    """What the trainer feeds its loss."""

    mask: torch.Tensor         # [B, P] positions the loss trains on
    old_logp: torch.Tensor     # [B, P] the ratio's denominator
    advantages: torch.Tensor   # [B]


@runtime_checkable
class TrainerAdapter(Protocol):
    """The trainer's probe points. Each method must run the trainer's real code path."""

    def policy(self) -> torch.nn.Module:
        """A fresh copy of the policy to check (step 0)."""

    def probe_batch(self) -> tuple[Any, Truth]:
        """Sample a probe batch the way the training pipeline samples -> (trainer batch, truth)."""

    def prepare(self, model: torch.nn.Module, batch: Any) -> Prepared:
        """The trainer's batch preparation: mask, old_logp, advantages."""

    def log_probs(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        """The trainer's recomputation of log pi(target) at every position, [B, P], no grad."""

    def loss(self, model: torch.nn.Module, batch: Any, rows: torch.Tensor, prep: Prepared) -> tuple[torch.Tensor, dict]:
        """The loss of `rows` in ONE forward pass (no accumulation) -> (differentiable loss, stats)."""

    def backward(self, model: torch.nn.Module, batch: Any, rows: torch.Tensor, prep: Prepared) -> dict:
        """The trainer's own backward for a minibatch of `rows` (with its accumulation), no
        optimizer step -> stats with at least `loss`, `ratio_max`, `ratio_min`."""

    def update(self, model: torch.nn.Module, batch: Any, ref: Optional[torch.nn.Module]) -> dict:
        """One full training update of `model` in place (fresh optimizer) -> stats with `approx_kl`."""

    def make_ref(self, model: torch.nn.Module) -> Optional[torch.nn.Module]:
        """The trainer's KL reference for `model`, or None when it uses no KL term."""

    def pad(self, batch: Any, extra: int) -> Any:
        """The same batch with `extra` more positions of padding, on the side the layout pads."""


class AdapterError(Exception):
    """An adapter spec that cannot be loaded; the message is one line."""


def _import_target(spec: str):
    if ":" not in spec:
        raise AdapterError(f"adapter spec {spec!r} must be MODULE:FACTORY or FILE.py:FACTORY")
    where, name = spec.rsplit(":", 1)
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise AdapterError(f"adapter file {where} does not exist")
            mod_spec = importlib.util.spec_from_file_location(f"_rlbisect_adapter_{path.stem}", path)
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[mod_spec.name] = module
            folder = str(path.resolve().parent)
            if folder not in sys.path:
                sys.path.insert(0, folder)
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except AdapterError:
        raise
    except Exception as e:   # the user's module failed to import: say which and why, in one line
        raise AdapterError(f"cannot import {where}: {type(e).__name__}: {e}".splitlines()[0]) from None
    factory = getattr(module, name, None)
    if not callable(factory):
        raise AdapterError(f"{where} has no callable {name!r}")
    return factory


def load_adapter(spec: str, **options) -> TrainerAdapter:
    """Build an adapter from `MODULE:FACTORY` or `FILE.py:FACTORY`, passing the options it accepts.

    An option the factory does not accept is an error when it was set (not None): silently
    ignoring `--bug` would check the wrong thing.
    """
    factory = _import_target(spec)
    params = inspect.signature(factory).parameters
    takes_all = any(p.kind is p.VAR_KEYWORD for p in params.values())
    kwargs = {}
    for key, value in options.items():
        if takes_all or key in params:
            kwargs[key] = value
        elif value is not None:
            raise AdapterError(f"{spec} does not accept option {key!r}")
    try:
        adapter = factory(**kwargs)
    except Exception as e:
        raise AdapterError(f"{spec} failed: {type(e).__name__}: {e}".splitlines()[0]) from None
    missing = [m for m in ("policy", "probe_batch", "prepare", "log_probs", "loss", "backward", "update",
                           "make_ref", "pad") if not callable(getattr(adapter, m, None))]
    if missing:
        raise AdapterError(f"{spec} returned an adapter without {', '.join(missing)}")
    return adapter


DEFAULT_ADAPTER = "reference_trainer.adapter:make_adapter"
