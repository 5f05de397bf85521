"""One update step saved to one file and loaded back without executing anything.

File format (`step-NNNNNN.pt` by convention; the content is a plain safetensors file, no pickle):

* tensors, namespaced: `model/<param>`, `optim/<path>` (each tensor of the optimizer state_dict,
  e.g. `optim/state/0/exp_avg`), `batch/<key>` (`batch/<path>` in a batch that also holds None,
  numbers or nested containers, its structure in the metadata), `rng/torch` (global CPU RNG),
  `rng/gen/<name>`, `rng/numpy` (numpy's global generator's keys; its position in the metadata),
  `rng/cuda/<i>` (each CUDA device's generator, when the loop had CUDA in use),
  optionally `frozen/<module>/<param>` (modules the update reads but never changes, such as a KL
  reference), `post/<param>` (the model after the update, so a replay can measure how far its
  update lands from the recorded one) and `grad/<param>` (gradients the parameters held before
  the update, which a loop that does not clear them adds into it), `sched/<path>` (tensors of a
  learning-rate scheduler's state_dict, if the loop gave one);
* safetensors metadata `rlbisect.meta`: one JSON document with everything else (step, format
  version, config, stats, hits, code identity, torch version, threads, the optimizer state's
  non-tensor structure, the Python `random` state, free-form meta);
* metadata `rlbisect.sha256`: a content hash over every byte (`integrity.py`, which also reads
  no more of a file than its header declares). Safety against hostile files comes from the
  format itself: safetensors + JSON, never `pickle`/`torch.load`, every field validated on load.

`load_snapshot` raises `SnapshotError` (one line) for every input it refuses. Taking state out of
a live loop is `capture.py`; putting it back, replaying and comparing is `replay.py`.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np
import safetensors.torch
import torch
from pydantic import BaseModel, ConfigDict, ValidationError
from torch import Tensor

from rlbisect.errors import InputError
from rlbisect.git.repo import CodeIdentity
from rlbisect.steps.integrity import (HASH_KEY, ZERO_HASH, IntegrityError, atomic_write,
                                     read_declared, seal, verified_metadata)
from rlbisect.steps.trees import decode_tree, encode_tree
from rlbisect.steps.spikes import Hit

FORMAT = "rlbisect-snapshot"
FORMAT_VERSION = 3   # 2: numpy's generator (rng/numpy); 3: CUDA's (rng/cuda/<i>); older ones load
class SnapshotError(InputError):
    """A file that is not a loadable snapshot (corrupt, truncated, foreign, hostile, missing)."""


@dataclass
class RngState:
    torch: Tensor | None = None  # torch.get_rng_state()
    generators: dict[str, Tensor] = field(default_factory=dict)  # name -> Generator.get_state()
    python: tuple | None = None  # random.getstate()
    numpy: tuple | None = None   # numpy.random.get_state(): ("MT19937", keys, pos, has_gauss, cached)
    cuda: list[Tensor] = field(default_factory=list)   # torch.cuda.get_rng_state_all(), if CUDA was in use

    def tensors(self) -> dict[str, Tensor]:
        """The generators' states as the file stores them (numpy's keys only: the rest is metadata)."""
        out = {} if self.torch is None else {"rng/torch": self.torch}
        out.update({f"rng/gen/{k}": v for k, v in self.generators.items()})
        if self.numpy is not None:
            out["rng/numpy"] = torch.from_numpy(self.numpy[1].astype("int64"))
        out.update({f"rng/cuda/{i}": t for i, t in enumerate(self.cuda)})
        return out


@dataclass
class Snapshot:
    """Everything one update consumed, plus what it logged. State is pre-update."""

    step: int
    model: dict[str, torch.Tensor]
    optimizer: dict | None  # a torch `Optimizer.state_dict()`, ready for `load_state_dict`
    batch: dict[str, torch.Tensor]
    rng: RngState
    config: dict = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)  # the step's recorded statistics
    hits: list[Hit] = field(default_factory=list)
    code: CodeIdentity = field(default_factory=CodeIdentity)
    post_update_sha256: str | None = None  # state_digest of the model after the update, if known
    update_norm: float | None = None  # ||params after - params before||, if known
    frozen: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)  # e.g. {"ref": state}
    post_update: dict[str, torch.Tensor] | None = None  # the model's state after the update
    grads: dict[str, torch.Tensor] | None = None  # param name -> .grad held before the update (None: not taken)
    scheduler: dict | None = None  # an LR scheduler's `state_dict()`, for an update that steps it
    post_optimizer_sha256: str | None = None  # optimizer_digest after the update, if known
    torch_version: str = torch.__version__
    num_threads: int = field(default_factory=torch.get_num_threads)
    format_version: int = FORMAT_VERSION
    created: str = ""
    meta: dict = field(default_factory=dict)


# --- save -------------------------------------------------------------------------------------------

def _cpu(t: torch.Tensor, seen: set[int]) -> torch.Tensor:
    t = t.detach().to("cpu").contiguous()
    ptr = t.untyped_storage().data_ptr()
    if ptr in seen:  # safetensors refuses tensors sharing memory
        t = t.clone()
    seen.add(t.untyped_storage().data_ptr())
    return t


def save_snapshot(path: str | os.PathLike, snap: Snapshot) -> Path:
    """Write `snap` atomically to `path` (temp file in the same directory, fsync, rename)."""
    path = Path(path)
    seen: set[int] = set()
    tensors: dict[str, torch.Tensor] = {}
    # keys other than strings ({0: inputs, 1: targets}) go in the tree too, which keeps an int an int
    plain_batch = all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in snap.batch.items())
    try:
        optim = None if snap.optimizer is None else encode_tree(snap.optimizer, tensors)
        sched = None if snap.scheduler is None else encode_tree(snap.scheduler, tensors, "sched")
        # a batch of tensors keeps the flat layout; one holding None masks, counts or nests, a tree
        batch_tree = None if plain_batch else encode_tree(snap.batch, tensors, "batch")
    except ValueError as e:
        raise SnapshotError(str(e)) from None
    tensors.update({f"model/{k}": v for k, v in snap.model.items()})
    if plain_batch:
        tensors.update({f"batch/{k}": v for k, v in snap.batch.items()})
    tensors.update(snap.rng.tensors())
    for name, state in snap.frozen.items():
        _check_module_name(name)
        tensors.update({f"frozen/{name}/{k}": v for k, v in state.items()})
    tensors.update({f"post/{k}": v for k, v in (snap.post_update or {}).items()})
    tensors.update({f"grad/{k}": v for k, v in (snap.grads or {}).items()})
    tensors = {k: _cpu(v, seen) for k, v in tensors.items()}
    header = {
        # the oldest version that holds what is saved: an rlbisect before it says "upgrade", not "unexpected"
        "format": FORMAT, "format_version": 3 if snap.rng.cuda else 2 if snap.rng.numpy is not None else 1,
        "step": snap.step,
        "created": snap.created or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch_version": snap.torch_version, "num_threads": snap.num_threads,
        "code": vars(snap.code), "config": snap.config, "stats": snap.stats,
        "hits": [h.to_dict() for h in snap.hits], "meta": snap.meta,
        "post_update_sha256": snap.post_update_sha256, "update_norm": snap.update_norm,
        "model_keys": list(snap.model), "batch_keys": list(snap.batch) if plain_batch else [],
        "batch_tree": batch_tree, "optimizer": optim, "scheduler": sched,
        "post_optimizer_sha256": snap.post_optimizer_sha256,
        "frozen_keys": {name: list(state) for name, state in snap.frozen.items()},
        "post_update_keys": None if snap.post_update is None else list(snap.post_update),
        "grad_keys": None if snap.grads is None else list(snap.grads),
        "rng": {"torch": snap.rng.torch is not None, "generators": list(snap.rng.generators),
                "python": snap.rng.python,
                "numpy": None if snap.rng.numpy is None else [snap.rng.numpy[0], *snap.rng.numpy[2:]],
                "cuda": len(snap.rng.cuda)},
    }
    try:
        meta_json = json.dumps(header)
    except (TypeError, ValueError) as e:
        raise SnapshotError(f"snapshot fields must be JSON-serialisable: {e}") from None
    blob = bytearray(safetensors.torch.save(tensors, metadata={
        "rlbisect.meta": meta_json, HASH_KEY: ZERO_HASH}))
    atomic_write(path, seal(blob))
    return path


def _check_module_name(name: str) -> None:
    # One path segment: "a/b" + "c" and "a" + "b/c" would otherwise name the same tensor.
    if not name or "/" in name:
        raise SnapshotError(f"frozen module name {name!r} must be non-empty and contain no '/'")


# --- load -------------------------------------------------------------------------------------------

class _Code(BaseModel):
    commit: str | None
    dirty: bool | None
    repo: str | None


class _Rng(BaseModel):
    torch: bool
    generators: list[str]
    python: tuple[int, tuple[int, ...], float | None] | None
    numpy: tuple[Literal["MT19937"], int, int, float] | None = None   # absent in files from before
    cuda: int = 0                                                     # CUDA devices' states, rng/cuda/<i>


class _Header(BaseModel):
    """What `rlbisect.meta` must contain; anything else is refused."""

    model_config = ConfigDict(extra="forbid")
    format: Literal["rlbisect-snapshot"]
    format_version: int
    step: int
    created: str
    torch_version: str
    num_threads: int
    code: _Code
    config: dict[str, Any]
    stats: dict[str, Any]
    hits: list[dict[str, Any]]
    meta: dict[str, Any]
    post_update_sha256: str | None
    update_norm: float | None
    model_keys: list[str]
    batch_keys: list[str]
    batch_tree: Any = None   # a batch holding more than tensors (files from before: always None)
    optimizer: Any
    rng: _Rng
    frozen_keys: dict[str, list[str]] = {}  # absent in files from before frozen modules existed
    post_update_keys: list[str] | None = None
    grad_keys: list[str] | None = None  # absent in files from before gradients were kept
    scheduler: Any = None   # the next two: absent in files from before they were kept
    post_optimizer_sha256: str | None = None


def _short(msg: str) -> str:   # a refusal is one line (SnapshotError collapses its whitespace)
    return msg if len(msg) <= 300 else msg[:297] + "..."


def load_snapshot(path: str | os.PathLike) -> Snapshot:
    """Read and validate a snapshot; `SnapshotError` with a one-line reason for anything refused."""
    path = Path(path)
    try:
        return _load(path)
    except (SnapshotError, IntegrityError) as e:
        raise SnapshotError(_short(f"{path}: {e}")) from None
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        msg = f"{path}: invalid snapshot metadata at {where}: {err['msg']}"
        raise SnapshotError(_short(msg)) from None
    except Exception as e:  # noqa: BLE001 - every refusal must be one SnapshotError, never a traceback
        raise SnapshotError(_short(f"{path}: not a valid snapshot ({type(e).__name__}: {e})")) from None


def _load(path: Path) -> Snapshot:
    try:
        if not path.is_file():
            raise SnapshotError("no such file" if not path.exists() else "not a regular file")
        data = read_declared(path)
    except OSError as e:
        raise SnapshotError(f"cannot read: {e.strerror or e}") from None
    head = _Header.model_validate_json(verified_metadata(data)["rlbisect.meta"])
    if head.format_version > FORMAT_VERSION:
        raise SnapshotError(f"format version {head.format_version} is newer than this rlbisect "
                            f"reads ({FORMAT_VERSION}); upgrade rlbisect")
    tensors = safetensors.torch.load(data)
    used: set[str] = set()

    def take(name: str) -> torch.Tensor:
        if name not in tensors:
            raise SnapshotError(f"tensor {name!r} is missing")
        used.add(name)
        return tensors[name]

    model = {k: take(f"model/{k}") for k in head.model_keys}
    batch = {k: take(f"batch/{k}") for k in head.batch_keys}
    if head.batch_tree is not None:
        batch = decode_tree(head.batch_tree, {k: take(k) for k in tensors if k.startswith("batch/")})
        if not isinstance(batch, dict):
            raise SnapshotError("the batch is not a dict")
    optim = None
    if head.optimizer is not None:
        optim = decode_tree(head.optimizer, {k: take(k) for k in tensors if k.startswith("optim/")})
        if not isinstance(optim, dict):
            raise SnapshotError("optimizer state is not a dict")
    sched = None
    if head.scheduler is not None:
        sched = decode_tree(head.scheduler, {k: take(k) for k in tensors if k.startswith("sched/")})
        if not isinstance(sched, dict):
            raise SnapshotError("scheduler state is not a dict")
    for name in head.frozen_keys:
        _check_module_name(name)
    frozen = {n: {k: take(f"frozen/{n}/{k}") for k in keys} for n, keys in head.frozen_keys.items()}
    post = None if head.post_update_keys is None else {k: take(f"post/{k}") for k in head.post_update_keys}
    grads = None if head.grad_keys is None else {k: take(f"grad/{k}") for k in head.grad_keys}
    rng = RngState(take("rng/torch") if head.rng.torch else None,
                   {k: take(f"rng/gen/{k}") for k in head.rng.generators}, head.rng.python,
                   None if head.rng.numpy is None else (head.rng.numpy[0], take("rng/numpy").numpy().astype("uint32"),
                                                        *head.rng.numpy[1:]),
                   [take(f"rng/cuda/{i}") for i in range(head.rng.cuda)])
    if extra := set(tensors) - used:
        raise SnapshotError(f"unexpected tensors {sorted(extra)[:3]}")
    for state in [rng.torch, *rng.generators.values()]:
        if state is not None:
            torch.Generator().set_state(state)  # refuses a malformed state now, not at replay
    if rng.python is not None:
        random.Random().setstate(rng.python)
    if rng.numpy is not None:
        np.random.RandomState().set_state(rng.numpy)
    if any(t.dtype != torch.uint8 or t.dim() != 1 for t in rng.cuda):   # a CUDA state is bytes, checked on set
        raise SnapshotError("a CUDA generator state is not a 1-D byte tensor")
    return Snapshot(
        step=head.step, model=model, optimizer=optim, batch=batch, rng=rng, config=head.config,
        stats=head.stats, hits=[Hit.from_dict(h) for h in head.hits], code=CodeIdentity(**vars(head.code)),
        post_update_sha256=head.post_update_sha256, update_norm=head.update_norm,
        frozen=frozen, post_update=post, grads=grads, scheduler=sched,
        post_optimizer_sha256=head.post_optimizer_sha256, torch_version=head.torch_version, num_threads=head.num_threads,
        format_version=head.format_version, created=head.created, meta=head.meta)
