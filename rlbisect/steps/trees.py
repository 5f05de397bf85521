"""Nested state as (a JSON structure, named tensors): how a snapshot stores the optimizer's
`state_dict` and a batch that holds more than tensors (None masks, counts, nested dicts).

Tensors leave by name (`optim/state/0/exp_avg`, `batch/inputs/0`); containers are tagged ({"d": [[key, value], ...]}
for a dict, {"u": [...]} for a tuple, {"t": name} for a tensor, a plain list for a list), so no JSON
object on disk is ambiguous on the way back and int keys stay ints.
"""

from __future__ import annotations

from typing import Any

import torch


def encode_tree(obj: Any, tensors: dict[str, torch.Tensor], path: str = "optim") -> Any:
    """The JSON structure of `obj`; its tensors are added to `tensors`. ValueError if not storable."""
    if isinstance(obj, torch.Tensor):
        name = path if path not in tensors else f"{path}#{len(tensors)}"  # keys 1 and "1" collide
        tensors[name] = obj
        return {"t": name}
    if isinstance(obj, dict):
        return {"d": [[_encode_key(k, path), encode_tree(v, tensors, f"{path}/{k}")] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        items = [encode_tree(v, tensors, f"{path}/{i}") for i, v in enumerate(obj)]
        return {"u": items} if isinstance(obj, tuple) else items
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise ValueError(f"cannot store a {type(obj).__name__} at {path}")


def _encode_key(k: Any, path: str) -> Any:
    if k is None or isinstance(k, (bool, int, float, str)):
        return k
    raise ValueError(f"cannot store a key of type {type(k).__name__} at {path}")


def optimizer_tensors(state: dict | None) -> dict[str, torch.Tensor]:
    """The optimizer state's tensors under the names they get on disk (`optim/state/0/exp_avg`)."""
    tensors: dict[str, torch.Tensor] = {}
    if state is not None:
        encode_tree(state, tensors)
    return tensors


def decode_tree(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of `encode_tree`; KeyError/ValueError on a structure it did not write."""
    if isinstance(obj, list):
        return [decode_tree(v, tensors) for v in obj]
    if isinstance(obj, dict):
        (tag, val), = obj.items()
        if tag == "t":
            return tensors[val]
        if tag == "u":
            return tuple(decode_tree(v, tensors) for v in val)
        if tag == "d":
            return {k: decode_tree(v, tensors) for k, v in val}
        raise ValueError(f"unknown tag {tag!r}")
    return obj


