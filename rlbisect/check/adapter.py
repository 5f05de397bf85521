"""The probe points a trainer exposes to the invariant checker.

The checker never reimplements a trainer: it calls the trainer's own batch preparation, loss,
gradient accumulation, optimizer step and reference model through this Protocol, and compares
what comes back with an independent source of truth that the *sampler* recorded (`Truth`: which
positions the policy sampled, the log-probabilities it sampled them with, the rewards).

Shapes: B episodes; P positions per episode (for a causal LM, P = T - 1). Everything the checker
reads is a plain tensor; the trainer's own batch object is opaque to it.

Point rlbisect at an adapter with `--adapter package.module:factory` or `--adapter file.py:factory`
(loaded as Python would: see :func:`load_adapter`); the factory is called with the keyword
arguments it accepts among `episodes`, `seed`, `kl_coef` and `bug`. `reference_trainer/adapter.py`
is a complete example; docs/extending.md walks through one.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence, runtime_checkable

import torch

from rlbisect.check.capabilities import Capabilities, capabilities_of
from rlbisect.check.spec import Objective, RunSpec


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
    # [B] the id of the task (prompt) each row answers, as the sampler was given it; None if not offered
    tasks: Optional[torch.Tensor] = None


@dataclass
class Prepared:
    """What the trainer feeds its loss."""

    mask: torch.Tensor         # [B, P] positions the loss trains on
    old_logp: torch.Tensor     # [B, P] the ratio's denominator
    advantages: torch.Tensor   # [B]


@runtime_checkable
class TrainerAdapter(Protocol):
    """The trainer's probe points. Each method must run the trainer's real code path.

    Besides these, an adapter may offer the optional members :class:`Offers` lists (read in one
    place, :meth:`Offers.of`); subclassing :class:`AdapterBase` declares them all as "not offered".
    """

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
        """The loss of `rows` in ONE forward pass (no accumulation) -> (differentiable loss, stats).
        It may take ``ref=None``: the KL reference whose term the loss then includes (check 11),
        and ``tap=None``: shown what the loss consumes (``tap("loss", ...)``, checks 19-20)."""

    def backward(self, model: torch.nn.Module, batch: Any, rows: torch.Tensor, prep: Prepared) -> dict:
        """The trainer's own backward for a minibatch of `rows` (with its accumulation), no
        optimizer step -> stats with at least `loss`, `ratio_max`, `ratio_min`."""

    def update(self, model: torch.nn.Module, batch: Any, ref: Optional[torch.nn.Module]) -> dict:
        """One full training update of `model` in place (fresh optimizer) -> stats with `approx_kl`.
        It may take ``tap=None`` and show it every loss it computes (``tap("loss", ...)``, see
        rlbisect.check.observe; check 15 compares what the loss consumed with prepare())."""

    def make_ref(self, model: torch.nn.Module) -> Optional[torch.nn.Module]:
        """The trainer's KL reference for `model`, or None when it uses no KL term."""

    def pad(self, batch: Any, extra: int) -> Any:
        """The same batch with `extra` more positions of padding, on the side the layout pads."""


REQUIRED = ("policy", "probe_batch", "prepare", "log_probs", "loss", "backward", "update", "make_ref", "pad")


class AdapterBase:
    """An optional base class: every optional member of an adapter, declared as not offered. An
    adapter need not subclass it (checks read any object through :meth:`Offers.of`)."""

    #: what the trainer can be asked (sampler log-probs, update shape, by-design differences)
    capabilities: Capabilities | dict = Capabilities()
    #: the policy objective: an :class:`~rlbisect.check.spec.Objective` (its exact value and
    #: gradient are checked), or only its kind: "ppo-clip" (the clip check applies), "cispo", ...
    objective: "str | Objective" = "ppo-clip"
    #: fault switch names ``rlbisect check --matrix`` runs, one row each (factory option ``bug``)
    faults: Sequence[str] = ()
    #: ``with_rewards(batch, rewards) -> batch``: the same batch with other rewards (check 12)
    with_rewards: Optional[Callable[[Any, torch.Tensor], Any]] = None
    #: ``train_run(steps, seed, eval_every, tap=None, settings=None) -> rows``: a short run of the
    #: real loop shown to ``tap`` (rlbisect.check.observe)
    train_run: Optional[Callable[..., list[dict]]] = None
    #: ``run_spec(steps, settings=None) -> RunSpec``: the optimizer, schedule and tasks it means to use
    run_spec: Optional[Callable[..., RunSpec]] = None
    #: {label: settings} at which every identity still holds; the checks exercise each by default
    variants: dict = {}
    #: the settings of the run-level checks' off-default run (default: every variant at once)
    run_variant: Optional[dict] = None
    #: {label: settings} only the cheap probes visit (the environment's contract, the learning-rate
    #: schedule): limits and schedules off the defaults that no training path above takes
    probe_variants: dict = {}
    #: ``with_settings(**settings) -> adapter``: the same trainer at other settings (for ``variants``)
    with_settings: Optional[Callable[..., Any]] = None
    #: ``lr_schedule(total) -> [lr, ...]``: the learning rate the trainer's own optimizer and
    #: scheduler set at each of ``total`` optimizer steps (built by its code, stepped without a model)
    lr_schedule: Optional[Callable[[int], Sequence[float]]] = None
    #: ``environment() -> probe``: the environment's contract (rlbisect.check.environment)
    environment: Optional[Callable[[], Any]] = None
    #: ``replay(snapshot, bug) -> Replayed``: re-run a saved step of this trainer (replay, promote)
    replay: Optional[Callable[[Any, Optional[str]], Any]] = None


@dataclass(frozen=True)
class Offers:
    """What an adapter offers beyond :class:`TrainerAdapter`'s required members: every optional
    member (see :class:`AdapterBase`) and optional keyword, read here and nowhere else."""

    capabilities: Capabilities
    objective: str               # the objective's kind
    spec: Optional[Objective]    # the objective in full, when declared
    objective_why: str           # why it is only a kind, when the adapter says
    faults: tuple[str, ...]
    with_rewards: Optional[Callable]
    train_run: Optional[Callable]
    run_spec: Optional[Callable]
    variants: dict
    run_variant: dict            # the off-default run's settings
    probe_variants: dict
    with_settings: Optional[Callable]
    lr_schedule: Optional[Callable]
    environment: Optional[Callable]
    replay: Optional[Callable]
    rows_in_log_probs: bool      # log_probs(model, batch, rows=...)
    ref_in_loss: bool            # loss(model, batch, rows, prep, ref=...)
    tap_in_loss: bool            # loss(model, batch, rows, prep, tap=...)
    tap_in_update: bool          # update(model, batch, ref, tap=...)
    tap_in_runs: bool            # train_run(steps, seed, eval_every, tap=..., settings=...)

    @classmethod
    def of(cls, adapter: Any) -> "Offers":
        def member(name: str) -> Any:
            value = getattr(adapter, name, None)
            return value if callable(value) else None
        declared = getattr(adapter, "objective", None) or "ppo-clip"
        spec = declared if isinstance(declared, Objective) else None
        variants, probe_variants = (getattr(adapter, name, None) or {} for name in ("variants", "probe_variants"))
        for name, value in (("variants", variants), ("probe_variants", probe_variants)):
            if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
                raise TypeError(f"{type(adapter).__name__}.{name} must be a dict of {{label: settings dict}}")
        train_run = member("train_run")
        run_variant = getattr(adapter, "run_variant", None)
        if run_variant is None:      # every variant at once, a later one winning a setting both make
            run_variant = {k: v for settings in variants.values() for k, v in settings.items()}
        return cls(capabilities_of(adapter), spec.kind if spec else str(declared), spec,
                   str(getattr(adapter, "objective_why", "") or ""), tuple(getattr(adapter, "faults", None) or ()), member("with_rewards"),
                   train_run, member("run_spec"), dict(variants), dict(run_variant), dict(probe_variants),
                   member("with_settings"), member("lr_schedule"), member("environment"), member("replay"), _takes(member("log_probs"), "rows"),
                   _takes(member("loss"), "ref"), _takes(member("loss"), "tap"), _takes(member("update"), "tap"),
                   _takes(train_run, "tap") and _takes(train_run, "settings"))


def _takes(method: Optional[Callable], name: str) -> bool:
    return method is not None and name in inspect.signature(method).parameters


# loading moved to rlbisect.check.loading; these names stay importable from here
from rlbisect.check.loading import (ADAPTERS, DEFAULT_ADAPTER, AdapterError, load_adapter,  # noqa: E402,F401,I001
                                    parse_adapter_opts)
