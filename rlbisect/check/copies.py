"""Copies of a policy that run their own weights.

``copy.deepcopy`` copies a function by reference, closure and all. Trainers that patch a model's
``forward`` on the instance with a closure over the model's original bound ``forward`` (TRL 1.16's
fused LM head: ``original_forward = model.forward``, then ``model.forward = MethodType(fused, model)``)
thus give every deep copy a forward whose unpatched path still runs the *original's* weights: a
copy moved or trained apart answers, on that path, with the policy it was copied from. A check
comparing the two would see no difference where there is one. :func:`clone` copies such closures
so that a bound method of the original inside one is rebound to the copy; the rest of
the closure stays shared, as a deep copy leaves it (accelerate's autocast wrapper cannot be copied).
"""

from __future__ import annotations

import copy
import types
from typing import Any, Optional, TypeVar

import torch

M = TypeVar("M", bound=torch.nn.Module)


def _rebound(value: Any, memo: dict) -> Any:
    """A method bound to an object the model's copy copied, bound to that copy; else ``value``."""
    if isinstance(value, types.MethodType) and id(value.__self__) in memo:
        return types.MethodType(value.__func__, memo[id(value.__self__)])
    return value


def _rebuilt(fn: types.FunctionType, memo: dict) -> Optional[types.FunctionType]:
    """``fn`` with the bound methods in its closure rebound to the copy (None: nothing to rebind).
    Anything else in the closure stays shared, as ``copy.deepcopy`` leaves every function."""
    cells, changed = [], False
    for cell in fn.__closure__ or ():
        try:
            contents = cell.cell_contents
        except ValueError:            # a cell not yet filled: stays empty
            cells.append(cell)
            continue
        new = _rebound(contents, memo)
        changed |= new is not contents
        cells.append(types.CellType(new) if new is not contents else cell)
    if not changed:
        return None
    out = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, tuple(cells))
    out.__kwdefaults__, out.__qualname__, out.__doc__ = fn.__kwdefaults__, fn.__qualname__, fn.__doc__
    out.__dict__.update(fn.__dict__)          # functools.wraps' __wrapped__
    return out


def clone(model: M) -> M:
    """A deep copy of ``model`` whose instance-level methods (a patched ``forward``, on any
    submodule) close over the copy, not the original."""
    memo: dict[int, Any] = {}
    new = copy.deepcopy(model, memo)
    for sub in new.modules():
        for attr, value in list(vars(sub).items()):
            if isinstance(value, types.MethodType) and isinstance(value.__func__, types.FunctionType) \
                    and (fn := _rebuilt(value.__func__, memo)) is not None:
                setattr(sub, attr, types.MethodType(fn, value.__self__))
    return new
