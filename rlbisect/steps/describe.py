"""What `rlbisect inspect` shows of a snapshot: everything but the tensor contents."""

from __future__ import annotations

import json
from typing import Any

import torch

from rlbisect.errors import printable
from rlbisect.steps.format import Snapshot
from rlbisect.steps.trees import encode_tree, optimizer_tensors


def describe(snap: Snapshot) -> dict[str, Any]:
    """A JSON-able summary: everything but the tensor contents (names, dtypes, shapes instead)."""
    def shapes(prefix: str, d: dict[str, torch.Tensor]) -> dict[str, str]:
        return {f"{prefix}{k}": f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)}"
                for k, t in d.items()}
    batch: dict[str, torch.Tensor] = {}
    encode_tree(snap.batch, batch, "batch")   # the batch's tensors under their names on disk
    frozen = {f"{n}/{k}": t for n, state in snap.frozen.items() for k, t in state.items()}
    return {
        "step": snap.step, "format_version": snap.format_version, "created": snap.created,
        "code": vars(snap.code), "torch_version": snap.torch_version, "num_threads": snap.num_threads,
        "hits": [h.to_dict() for h in snap.hits], "stats": snap.stats, "config": snap.config,
        "post_update_sha256": snap.post_update_sha256, "update_norm": snap.update_norm,
        "meta": snap.meta,
        # gradients the parameters held before the update: they matter where the loop does not clear them
        "held_grad_norm": None if not snap.grads else
        float(sum(g.double().pow(2).sum() for g in snap.grads.values()) ** 0.5),
        "tensors": {**shapes("", batch), **shapes("model/", snap.model),
                    **shapes("", optimizer_tensors(snap.optimizer)), **shapes("", snap.rng.tensors()),
                    **shapes("frozen/", frozen),
                    **shapes("post/", snap.post_update or {}), **shapes("grad/", snap.grads or {})},
    }


def _flat(value: Any) -> str:
    """A string from the file on one line: a newline in a hit's message or a stat's name would
    print a line the file made up (a second `stats` section, "fired none")."""
    return str(value).replace("\n", "\\n")


def render_text(info: dict[str, Any]) -> str:
    """The `describe` dict as aligned text for a terminal."""
    code = info["code"]
    ident = "unknown" if code["commit"] is None else code["commit"][:12] + (
        " (dirty)" if code["dirty"] else "" if code["dirty"] is False else " (dirty: unknown)")
    lines = [f"step           {info['step']}",
             f"format         {info['format_version']}   created {_flat(info['created'])}",
             f"code           {_flat(ident)}" + (f"   {_flat(code['repo'])}" if code["repo"] else ""),
             f"torch          {_flat(info['torch_version'])}   threads {info['num_threads']}"]
    if info["update_norm"] is not None:
        lines.append(f"update norm    {info['update_norm']:.6g}   post-update sha256 "
                     f"{(info['post_update_sha256'] or '?')[:16]}")
    if info.get("held_grad_norm"):
        lines.append(f"held grads     norm {info['held_grad_norm']:.6g} before the update (a loop that "
                     "does not clear them adds them into it; replay restores them)")
    n = len(info["hits"])
    lines.append("fired          " + (f"{n} detector hit{'s' * (n > 1)}" if n else "none (periodic snapshot)"))
    lines += [f"  {_flat(h['detector'])}: {_flat(h['message'])}" for h in info["hits"]]
    lines.append("stats")
    lines += [f"  {_flat(k):<16} {v!r}" for k, v in info["stats"].items()]
    lines.append("config         " + json.dumps(info["config"], sort_keys=True))
    if info["meta"]:
        lines.append("meta           " + json.dumps(info["meta"], sort_keys=True))
    lines.append("tensors")
    lines += [f"  {_flat(k):<40} {v}" for k, v in info["tensors"].items()]
    return printable("\n".join(lines))     # every string came from the file: no terminal escapes
