"""Taking a step's state out of a live training loop: clones, RNG states, code identity, digests.

Everything here works on live objects (modules, optimizers, generators, a git checkout); the file
format lives in `snapshot.py`, putting state back and comparing it in `replay.py`.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import subprocess
from typing import Any

import torch

from rlbisect.snapshot import CodeIdentity, RngState, Snapshot


def code_identity(path: str | os.PathLike | None = None) -> CodeIdentity:
    """Commit and dirty flag of the git repo containing `path` (default: cwd); unknowns on any failure."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(path or "."), *args], capture_output=True, text=True,
                              timeout=5, check=True).stdout.strip()
    try:
        root, commit = git("rev-parse", "--show-toplevel"), git("rev-parse", "HEAD")
    except (OSError, subprocess.SubprocessError):
        return CodeIdentity()
    try:  # untracked files are ignored: they rarely change the code that runs
        dirty: bool | None = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        dirty = None
    return CodeIdentity(commit, dirty, root)


def capture_rng(generators: dict[str, torch.Generator] | None = None) -> RngState:
    return RngState(torch.get_rng_state(), {n: g.get_state() for n, g in (generators or {}).items()},
                    random.getstate())


def clone(obj: Any) -> Any:
    """Deep copy of a nested dict/list/tuple, cloning tensors (a state_dict only holds references)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: clone(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(clone(v) for v in obj)
    return obj


def capture(step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
            batch: dict[str, torch.Tensor], generators: dict[str, torch.Generator] | None = None,
            **fields: Any) -> Snapshot:
    """Clone the pre-update state in memory (no disk I/O, no device sync); `fields` fill the rest."""
    return Snapshot(step=step, model=clone(model.state_dict()),
                    optimizer=None if optimizer is None else clone(optimizer.state_dict()),
                    batch=clone(dict(batch)), rng=capture_rng(generators), **fields)


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


def diff_norm(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float | None:
    """||a - b|| over the floating-point tensors both hold (float64 sums); None if there are none."""
    sq = [(a[k].detach().double() - v.detach().double()).pow(2).sum()
          for k, v in b.items() if v.is_floating_point() and k in a and a[k].shape == v.shape]
    return math.sqrt(float(sum(sq))) if sq else None
