"""Spent gradients poisoned, to see whether an optimizer step reads the step before's gradient.

Once a step has used its gradients they are spent, and a correct trainer clears them (zero_grad
before the next backward, or right after the step) before the next step reads any. While
:func:`spent_gradients_poisoned` is active, every optimizer step's gradients are overwritten with
NaN as soon as the step returns; the step after it then finds NaN in its incoming gradients only if
nothing cleared them. Clipping cannot hide it (NaN survives any rescaling), and in a trainer that
clears them the poison is gone before it is read, so the update's numbers are bit for bit the same.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook


@dataclass
class StepLeaks:
    steps: int = 0     # optimizer steps taken while watched
    leaked: int = 0    # steps whose incoming gradients still held the previous step's poison


def _params(optimizer: torch.optim.Optimizer) -> Iterator[torch.Tensor]:
    for group in optimizer.param_groups:
        yield from group["params"]


@contextmanager
def spent_gradients_poisoned() -> Iterator[StepLeaks]:
    """Every optimizer step in the block (any optimizer, wrapped or not) -> the counts in the
    yielded :class:`StepLeaks`."""
    out, poisoned = StepLeaks(), dict[int, torch.Tensor]()

    def before(optimizer, args, kwargs):
        out.steps += 1
        # the very tensor we poisoned, still NaN: no zero_grad reached it (a NaN gradient freshly
        # made by backward lands in a new tensor, or in a zeroed one only in a trainer broken anyway)
        if any(p.grad is not None and poisoned.get(id(p)) is p.grad and bool(torch.isnan(p.grad).any())
               for p in _params(optimizer)):
            out.leaked += 1

    def after(optimizer, args, kwargs):
        for p in _params(optimizer):
            if p.grad is not None:
                with torch.no_grad():
                    p.grad.fill_(float("nan"))
                poisoned[id(p)] = p.grad

    handles = register_optimizer_step_pre_hook(before), register_optimizer_step_post_hook(after)
    try:
        yield out
    finally:
        for h in handles:
            h.remove()


@contextmanager
def optimizers_stepped() -> Iterator[list]:
    """The optimizers (any, wrapped or not) that take a step in the block, each once, in order. Held
    by strong reference, so a freed optimizer's id cannot be reused by its replacement."""
    seen: list = []

    def note(optimizer, args, kwargs):
        if not any(o is optimizer for o in seen):
            seen.append(optimizer)
    handle = register_optimizer_step_pre_hook(note)
    try:
        yield seen
    finally:
        handle.remove()
