"""Putting a snapshot back into live objects: model, gradients, optimizer, scheduler, RNGs.

A replayer builds the trainer's objects as the training loop does, then calls :func:`restore` so
they hold the state right before the recorded update. Nothing here runs the update.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from rlbisect.steps.capture import copy_tensors
from rlbisect.steps.format import Snapshot


def restore_model(snap: Snapshot, model: torch.nn.Module) -> None:
    """The parameters and buffers, and the gradients they held (a snapshot that kept none leaves
    them as they are)."""
    model.load_state_dict(snap.model)  # copies into the existing parameters
    if snap.grads is not None:
        params = dict(model.named_parameters())
        if unknown := sorted(set(snap.grads) - set(params)):
            raise ValueError(f"the snapshot holds gradients of parameters this model lacks: {unknown[:3]}")
        for name, p in params.items():
            held = snap.grads.get(name)
            p.grad = None if held is None else held.clone().to(p.device)


def restore_optimizer(snap: Snapshot, optimizer: torch.optim.Optimizer) -> None:
    if snap.optimizer is None:
        raise ValueError("this snapshot holds no optimizer state")
    # load_state_dict keeps same-dtype tensors by reference: clone so replay cannot edit the snapshot.
    optimizer.load_state_dict(copy_tensors(snap.optimizer))


def restore_scheduler(snap: Snapshot, scheduler: Any) -> None:
    """A learning-rate scheduler the update steps itself (between its minibatches): its position
    and learning rates as recorded. Its functions (a LambdaLR's lambda) are the replayer's own.
    Build it before the optimizer's state goes back: a scheduler's constructor sets the rates."""
    if snap.scheduler is None:
        raise ValueError("this snapshot holds no scheduler state (pass scheduler= to the hook)")
    scheduler.load_state_dict(copy_tensors(snap.scheduler))


def restore_rng(snap: Snapshot, generators: dict[str, torch.Generator] | None = None) -> None:
    """Set the global torch RNG, CUDA's, Python `random`, numpy's global generator and each named generator
    (names must match)."""
    generators = generators or {}
    if set(generators) != set(snap.rng.generators):
        raise ValueError(f"generators {sorted(generators)} do not match the snapshot's "
                         f"{sorted(snap.rng.generators)}")
    if snap.rng.torch is not None:
        torch.set_rng_state(snap.rng.torch.clone())
    for name, g in generators.items():
        g.set_state(snap.rng.generators[name].clone())
    if snap.rng.python is not None:
        random.setstate(snap.rng.python)
    if snap.rng.numpy is not None:
        np.random.set_state(snap.rng.numpy)
    if snap.rng.cuda and torch.cuda.is_available():   # without CUDA the replay draws nothing from it
        if torch.cuda.device_count() < len(snap.rng.cuda):
            raise ValueError(f"the step ran on {len(snap.rng.cuda)} CUDA devices; this machine has "
                             f"{torch.cuda.device_count()}")
        torch.cuda.set_rng_state_all([t.clone() for t in snap.rng.cuda])


def restore(snap: Snapshot, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
            generators: dict[str, torch.Generator] | None = None, scheduler: Any = None) -> None:
    """Put model, optimizer, scheduler and RNGs back to the state right before the recorded update."""
    restore_model(snap, model)
    if optimizer is not None:
        restore_optimizer(snap, optimizer)
    if scheduler is not None:
        restore_scheduler(snap, scheduler)
    restore_rng(snap, generators)
