"""One update step saved to one file, loaded without executing anything, and replayed.

File format (`step-NNNNNN.pt` by convention; the content is a plain safetensors file, no pickle):

* tensors, namespaced: `model/<param>`, `optim/<path>` (each tensor of the optimizer state_dict,
  e.g. `optim/state/0/exp_avg`), `batch/<key>`, `rng/torch` (global CPU RNG), `rng/gen/<name>`;
* safetensors metadata `rlbisect.meta`: one JSON document with everything else (step, format
  version, config, stats, hits, code identity, torch version, threads, the optimizer state's
  non-tensor structure, the Python `random` state, free-form meta);
* metadata `rlbisect.sha256`: sha256 of the whole file with these 64 hex digits read as "0".
  The hash covers every byte, so truncation or one flipped byte anywhere is refused. It detects
  corruption, not a forger (anyone can recompute it); safety against hostile files comes from the
  format itself: safetensors + JSON, never `pickle`/`torch.load`, every field validated on load.

`load_snapshot` raises `SnapshotError` (one line) for every input it refuses.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import random
import re
import struct
import secrets
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, NamedTuple

import safetensors.torch
import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from rlbisect.metrics import is_timing
from rlbisect.spikes import Hit

FORMAT = "rlbisect-snapshot"
FORMAT_VERSION = 1
_MAX_HEADER = 100 * 1024 * 1024  # safetensors' own cap; a larger claim is refused before allocating
_HASH_KEY = re.compile(rb'"rlbisect\.sha256":"')  # unescaped quotes: only the real key matches
_HASH_VALUE = re.compile(rb'[0-9a-f]{64}"')
_ZERO_HASH = "0" * 64


class SnapshotError(Exception):
    """A file that is not a loadable snapshot (corrupt, truncated, foreign, hostile, missing)."""


@dataclass
class CodeIdentity:
    """The git state of the training code: commit sha, dirty flag, repo root (None when unknown)."""

    commit: str | None = None
    dirty: bool | None = None
    repo: str | None = None


@dataclass
class RngState:
    torch: torch.Tensor | None = None  # torch.get_rng_state()
    generators: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> Generator.get_state()
    python: tuple | None = None  # random.getstate()


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
    torch_version: str = torch.__version__
    num_threads: int = field(default_factory=torch.get_num_threads)
    format_version: int = FORMAT_VERSION
    created: str = ""
    meta: dict = field(default_factory=dict)


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


def _clone(obj: Any) -> Any:
    """Deep copy of a nested dict/list/tuple, cloning tensors (a state_dict only holds references)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_clone(v) for v in obj)
    return obj


def capture(step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
            batch: dict[str, torch.Tensor], generators: dict[str, torch.Generator] | None = None,
            **fields: Any) -> Snapshot:
    """Clone the pre-update state in memory (no disk I/O, no device sync); `fields` fill the rest."""
    return Snapshot(step=step, model=_clone(model.state_dict()),
                    optimizer=None if optimizer is None else _clone(optimizer.state_dict()),
                    batch=_clone(dict(batch)), rng=capture_rng(generators), **fields)


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


# --- optimizer state <-> (JSON structure, named tensors) -------------------------------------------

def _encode(obj: Any, tensors: dict[str, torch.Tensor], path: str = "optim") -> Any:
    # Tensors leave by name (optim/state/0/exp_avg); containers are tagged, so no JSON object on
    # disk is ambiguous on the way back.
    if isinstance(obj, torch.Tensor):
        name = path if path not in tensors else f"{path}#{len(tensors)}"  # keys 1 and "1" collide
        tensors[name] = obj
        return {"t": name}
    if isinstance(obj, dict):
        return {"d": [[_encode_key(k), _encode(v, tensors, f"{path}/{k}")] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        items = [_encode(v, tensors, f"{path}/{i}") for i, v in enumerate(obj)]
        return {"u": items} if isinstance(obj, tuple) else items
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise SnapshotError(f"cannot store {type(obj).__name__} in the optimizer state")


def _encode_key(k: Any) -> Any:
    if k is None or isinstance(k, (bool, int, float, str)):
        return k
    raise SnapshotError(f"cannot store optimizer state key of type {type(k).__name__}")


def _decode(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    if isinstance(obj, dict):
        (tag, val), = obj.items()
        if tag == "t":
            return tensors[val]
        if tag == "u":
            return tuple(_decode(v, tensors) for v in val)
        if tag == "d":
            return {k: _decode(v, tensors) for k, v in val}
        raise ValueError(f"unknown tag {tag!r}")
    return obj


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
    optim = None if snap.optimizer is None else _encode(snap.optimizer, tensors)
    tensors.update({f"model/{k}": v for k, v in snap.model.items()})
    tensors.update({f"batch/{k}": v for k, v in snap.batch.items()})
    if snap.rng.torch is not None:
        tensors["rng/torch"] = snap.rng.torch
    tensors.update({f"rng/gen/{k}": v for k, v in snap.rng.generators.items()})
    tensors = {k: _cpu(v, seen) for k, v in tensors.items()}
    header = {
        "format": FORMAT, "format_version": snap.format_version, "step": snap.step,
        "created": snap.created or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch_version": snap.torch_version, "num_threads": snap.num_threads,
        "code": vars(snap.code), "config": snap.config, "stats": snap.stats,
        "hits": [h.to_dict() for h in snap.hits], "meta": snap.meta,
        "post_update_sha256": snap.post_update_sha256, "update_norm": snap.update_norm,
        "model_keys": list(snap.model), "batch_keys": list(snap.batch), "optimizer": optim,
        "rng": {"torch": snap.rng.torch is not None, "generators": list(snap.rng.generators),
                "python": snap.rng.python},
    }
    try:
        meta_json = json.dumps(header)
    except (TypeError, ValueError) as e:
        raise SnapshotError(f"snapshot fields must be JSON-serialisable: {e}") from None
    blob = bytearray(safetensors.torch.save(tensors, metadata={
        "rlbisect.meta": meta_json, "rlbisect.sha256": _ZERO_HASH}))
    at = _HASH_KEY.search(blob, 8, 8 + struct.unpack("<Q", blob[:8])[0]).end()
    blob[at:at + 64] = hashlib.sha256(blob).hexdigest().encode()
    _atomic_write(path, blob)
    return path


def _atomic_write(path: Path, data: bytes | bytearray) -> None:
    # os.open with 0o666 honours the umask (mkstemp would force 0600 on a file meant to be shared).
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable; not possible everywhere (e.g. Windows)
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


# --- load -------------------------------------------------------------------------------------------

class _Code(BaseModel):
    commit: str | None
    dirty: bool | None
    repo: str | None


class _Rng(BaseModel):
    torch: bool
    generators: list[str]
    python: tuple[int, tuple[int, ...], float | None] | None


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
    optimizer: Any
    rng: _Rng


def _verified_header(data: bytes) -> dict[str, str]:
    """The safetensors metadata, after checking length fields and the content hash."""
    if len(data) < 8:
        raise SnapshotError("empty or too short to be a snapshot")
    n = struct.unpack("<Q", data[:8])[0]
    if n > _MAX_HEADER or 8 + n > len(data):
        raise SnapshotError(f"header length {n} does not fit a {len(data)}-byte file "
                            "(not a snapshot, or truncated)")
    found = [m.end() for m in _HASH_KEY.finditer(data, 8, 8 + n)]
    if not found:
        raise SnapshotError("no rlbisect content hash (not an rlbisect snapshot, or a damaged header)")
    at = found[0]
    if len(found) > 1 or not _HASH_VALUE.fullmatch(data, at, at + 65):
        raise SnapshotError("content hash field is damaged: the file is corrupted or was modified")
    claimed, view = data[at:at + 64].decode(), memoryview(data)
    h = hashlib.sha256(view[:at])  # hashed in place: no second copy of a large file
    h.update(_ZERO_HASH.encode())
    h.update(view[at + 64:])
    if not hmac.compare_digest(h.hexdigest(), claimed):
        raise SnapshotError("content hash mismatch: the file is corrupted, truncated or was modified")
    return json.loads(data[8:8 + n])["__metadata__"]


def load_snapshot(path: str | os.PathLike) -> Snapshot:
    """Read and validate a snapshot; `SnapshotError` with a one-line reason for anything refused."""
    path = Path(path)
    try:
        return _load(path)
    except SnapshotError as e:
        raise SnapshotError(_one_line(f"{path}: {e}")) from None
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        msg = f"{path}: invalid snapshot metadata at {where}: {err['msg']}"
        raise SnapshotError(_one_line(msg)) from None
    except Exception as e:  # noqa: BLE001 - every refusal must be one SnapshotError, never a traceback
        raise SnapshotError(_one_line(f"{path}: not a valid snapshot ({type(e).__name__}: {e})")) from None


def _one_line(msg: str) -> str:
    msg = " ".join(msg.split())
    return msg if len(msg) <= 300 else msg[:297] + "..."


def _load(path: Path) -> Snapshot:
    try:
        if not path.is_file():
            raise SnapshotError("no such file" if not path.exists() else "not a regular file")
        data = path.read_bytes()
    except OSError as e:
        raise SnapshotError(f"cannot read: {e.strerror or e}") from None
    head = _Header.model_validate_json(_verified_header(data)["rlbisect.meta"])
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
    optim = None
    if head.optimizer is not None:
        optim = _decode(head.optimizer, {k: take(k) for k in tensors if k.startswith("optim/")})
        if not isinstance(optim, dict):
            raise SnapshotError("optimizer state is not a dict")
    rng = RngState(take("rng/torch") if head.rng.torch else None,
                   {k: take(f"rng/gen/{k}") for k in head.rng.generators}, head.rng.python)
    if extra := set(tensors) - used:
        raise SnapshotError(f"unexpected tensors {sorted(extra)[:3]}")
    for state in [rng.torch, *rng.generators.values()]:
        if state is not None:
            torch.Generator().set_state(state)  # refuses a malformed state now, not at replay
    if rng.python is not None:
        random.Random().setstate(rng.python)
    return Snapshot(
        step=head.step, model=model, optimizer=optim, batch=batch, rng=rng, config=head.config,
        stats=head.stats, hits=[Hit.from_dict(h) for h in head.hits], code=CodeIdentity(**vars(head.code)),
        post_update_sha256=head.post_update_sha256, update_norm=head.update_norm,
        torch_version=head.torch_version, num_threads=head.num_threads,
        format_version=head.format_version, created=head.created, meta=head.meta)


# --- restore and compare -------------------------------------------------------------------------------

def restore_model(snap: Snapshot, model: torch.nn.Module) -> None:
    model.load_state_dict(snap.model)  # copies into the existing parameters


def restore_optimizer(snap: Snapshot, optimizer: torch.optim.Optimizer) -> None:
    if snap.optimizer is None:
        raise ValueError("this snapshot holds no optimizer state")
    # load_state_dict keeps same-dtype tensors by reference: clone so replay cannot edit the snapshot.
    optimizer.load_state_dict(_clone(snap.optimizer))


def restore_rng(snap: Snapshot, generators: dict[str, torch.Generator] | None = None) -> None:
    """Set the global torch RNG, Python `random`, and each named generator (names must match)."""
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


def restore(snap: Snapshot, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
            generators: dict[str, torch.Generator] | None = None) -> None:
    """Put model, optimizer and RNGs back to the state right before the recorded update."""
    restore_model(snap, model)
    if optimizer is not None:
        restore_optimizer(snap, optimizer)
    restore_rng(snap, generators)


class StatRow(NamedTuple):
    name: str
    recorded: Any
    replayed: Any
    abs_diff: float | None
    ok: bool


def _same(a: Any, b: Any, rtol: float, atol: float) -> tuple[float | None, bool]:
    num = (int, float)
    if not (isinstance(a, num) and isinstance(b, num)) or isinstance(a, bool) or isinstance(b, bool):
        return None, a == b
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return (0.0, True) if math.isnan(a) and math.isnan(b) else (math.nan, False)
    if a == b:  # also covers equal infinities; -0.0 vs 0.0 differ in bits, so check the sign
        return 0.0, rtol > 0 or atol > 0 or math.copysign(1, a) == math.copysign(1, b)
    diff = abs(a - b)
    return diff, diff <= atol + rtol * abs(a)


def compare_stats(recorded: dict, replayed: dict, rtol: float = 0.0, atol: float = 0.0) -> list[StatRow]:
    """One row per statistic (timing keys excluded); exact by default. A missing side is not ok."""
    rows = []
    for name in [*recorded, *(k for k in replayed if k not in recorded)]:
        if is_timing(name):
            continue
        if name not in recorded or name not in replayed:
            rows.append(StatRow(name, recorded.get(name), replayed.get(name), None, False))
            continue
        diff, ok = _same(recorded[name], replayed[name], rtol, atol)
        rows.append(StatRow(name, recorded[name], replayed[name], diff, ok))
    return rows


# --- inspect ----------------------------------------------------------------------------------------

def describe(snap: Snapshot) -> dict[str, Any]:
    """A JSON-able summary: everything but the tensor contents (names, dtypes, shapes instead)."""
    def shapes(prefix: str, d: dict[str, torch.Tensor]) -> dict[str, str]:
        return {f"{prefix}{k}": f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)}"
                for k, t in d.items()}
    optim_tensors: dict[str, torch.Tensor] = {}
    if snap.optimizer is not None:
        _encode(snap.optimizer, optim_tensors)
    rng = {"rng/torch": snap.rng.torch} if snap.rng.torch is not None else {}
    return {
        "step": snap.step, "format_version": snap.format_version, "created": snap.created,
        "code": vars(snap.code), "torch_version": snap.torch_version, "num_threads": snap.num_threads,
        "hits": [h.to_dict() for h in snap.hits], "stats": snap.stats, "config": snap.config,
        "post_update_sha256": snap.post_update_sha256, "update_norm": snap.update_norm,
        "meta": snap.meta,
        "tensors": {**shapes("batch/", snap.batch), **shapes("model/", snap.model),
                    **shapes("", optim_tensors), **shapes("", rng),
                    **shapes("rng/gen/", snap.rng.generators)},
    }


def render_text(info: dict[str, Any]) -> str:
    """The `describe` dict as aligned text for a terminal."""
    code = info["code"]
    ident = "unknown" if code["commit"] is None else code["commit"][:12] + (
        " (dirty)" if code["dirty"] else "" if code["dirty"] is False else " (dirty: unknown)")
    lines = [f"step           {info['step']}",
             f"format         {info['format_version']}   created {info['created']}",
             f"code           {ident}" + (f"   {code['repo']}" if code["repo"] else ""),
             f"torch          {info['torch_version']}   threads {info['num_threads']}"]
    if info["update_norm"] is not None:
        lines.append(f"update norm    {info['update_norm']:.6g}   post-update sha256 "
                     f"{(info['post_update_sha256'] or '?')[:16]}")
    n = len(info["hits"])
    lines.append("fired          " + (f"{n} detector hit{'s' * (n > 1)}" if n else "none (periodic snapshot)"))
    lines += [f"  {h['detector']}: {h['message']}" for h in info["hits"]]
    lines.append("stats")
    lines += [f"  {k:<16} {v!r}" for k, v in info["stats"].items()]
    lines.append("config         " + json.dumps(info["config"], sort_keys=True))
    if info["meta"]:
        lines.append("meta           " + json.dumps(info["meta"], sort_keys=True))
    lines.append("tensors")
    lines += [f"  {k:<40} {v}" for k, v in info["tensors"].items()]
    return "\n".join(lines)
