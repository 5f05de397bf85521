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
Loading works the way Python does: `MODULE:FACTORY` is found from the current folder first (as
`python -m` would); a FILE.py inside a package (folders with `__init__.py`) is imported as part of
that package, so its relative imports work; a FILE.py on its own is run as a standalone module
with its folder first on `sys.path`. Each file is imported once per process.
See `reference_trainer/adapter.py` for a complete example and the README for a walk-through.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol, runtime_checkable

import torch

from rlbisect.errors import InputError


@dataclass
class Truth:
    """What the sampler recorded, independently of the trainer's batch code."""

    owned: torch.Tensor        # [B, P] 1.0 where the policy sampled the target token
    sample_logp: torch.Tensor  # [B, P] the sampler's log-prob of that token (anything elsewhere)
    rewards: torch.Tensor      # [B]
    group_size: int            # rows are laid out group by group: [g0 x G, g1 x G, ...]
    # [B] tokens the sampler drew from the policy in each row, counted where it draws (not from
    # the owner tags above, which a stripped stop string can get wrong); None if not recorded
    drawn: Optional[torch.Tensor] = None
    # [B] the configured reward applied again to each finished episode's record (outcome, turns
    # used), apart from the sampler's own scoring; None if not offered
    rescored: Optional[torch.Tensor] = None


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
        """The trainer's recomputation of log pi(target) at every position, [B, P], no grad. It may
        take ``rows=None`` and then return only those rows, [len(rows), P] (a cheaper check 11)."""

    def loss(self, model: torch.nn.Module, batch: Any, rows: torch.Tensor, prep: Prepared) -> tuple[torch.Tensor, dict]:
        """The loss of `rows` in ONE forward pass (no accumulation) -> (differentiable loss, stats)."""

    def backward(self, model: torch.nn.Module, batch: Any, rows: torch.Tensor, prep: Prepared) -> dict:
        """The trainer's own backward for a minibatch of `rows` (with its accumulation), no
        optimizer step -> stats with at least `loss`, `ratio_max`, `ratio_min`."""

    def update(self, model: torch.nn.Module, batch: Any, ref: Optional[torch.nn.Module]) -> dict:
        """One full training update of `model` in place (fresh optimizer) -> stats with `approx_kl`.
        Optionally it takes ``observe=None`` and calls ``observe(rows, mask, old_logp, advantages)``
        with the tensors its loss is handed, per minibatch (check 15 compares them with prepare())."""

    def make_ref(self, model: torch.nn.Module) -> Optional[torch.nn.Module]:
        """The trainer's KL reference for `model`, or None when it uses no KL term."""

    def pad(self, batch: Any, extra: int) -> Any:
        """The same batch with `extra` more positions of padding, on the side the layout pads."""


def accepts(method, name: str) -> bool:
    """Whether an adapter's method takes the optional keyword ``name`` (``loss(ref=)``,
    ``log_probs(rows=)``, ``update(observe=)``): the checks that need it are n/a or slower without."""
    return name in inspect.signature(method).parameters


class AdapterError(InputError):
    """An adapter spec that cannot be loaded (exit 2); the message is one line."""


def _first(folder: Path) -> None:
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


def _import_file(path: Path):
    """A FILE.py adapter: as part of its package if it is in one, else standalone."""
    path = path.resolve()
    package = path.parent
    while (package / "__init__.py").is_file():
        package = package.parent
    if package != path.parent:   # in a package: import it by its dotted name, from its root
        _first(package)
        dotted = ".".join(path.relative_to(package).with_suffix("").parts)
        return importlib.import_module(dotted)
    # standalone: one module per file and process, so a second load (a --matrix row) does not
    # run the file again and stack whatever it patches
    mod_name = "_rlbisect_adapter_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    mod_spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(mod_spec)
    _first(path.parent)
    sys.modules[mod_name] = module
    try:
        mod_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[mod_name]
        raise
    return module


def _import_target(spec: str):
    if ":" not in spec:
        raise AdapterError(f"adapter spec {spec!r} must be MODULE:FACTORY or FILE.py:FACTORY")
    where, name = spec.rsplit(":", 1)
    try:
        if where.endswith(".py"):
            if not Path(where).is_file():
                raise AdapterError(f"adapter file {where} does not exist")
            module = _import_file(Path(where))
        else:
            _first(Path.cwd())   # as `python -m` would: a module in the current folder is found
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


def parse_adapter_opts(pairs: list[str] | None) -> dict[str, Any]:
    """``KEY=VALUE`` pairs (``--adapter-opt``) -> factory keyword arguments; a value that reads as
    JSON (a number, true/false, null, a list) is passed as that, anything else as a string."""
    import json
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip().isidentifier():
            raise AdapterError(f"--adapter-opt {pair!r}: expected KEY=VALUE, e.g. temperature=0.7")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out
