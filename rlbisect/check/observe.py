"""Taps on a trainer: what its loss is handed and computes, what it samples and evaluates, and what
every optimizer step receives. Observed, never recomputed by the trainer's side.

A trainer's loop (or its adapter) calls a tap, a plain callable ``tap(event, **values)``:

    tap("sampled", step=k, model=policy, batch=batch, truth=Truth)
        once per training step, after sampling and before the update: the trainer's policy, its
        batch, and what the sampler recorded (:class:`~rlbisect.check.adapter.Truth`, with ``tasks``)
    tap("loss", rows=..., mask=..., old_logp=..., advantages=..., ref_logp=None, logits=None,
        targets=None, logp=None, loss=loss)
        every forward pass of the loss, before its backward: the rows of the step's batch, the
        tensors the loss consumes exactly as it consumes them, the policy's raw (untempered)
        ``logits`` with ``targets`` (or its log-probs ``logp``) still attached to the graph, and
        the loss it returns (None where the loss is formed later: its identity is then unchecked)
    tap("eval_begin", step=k, model=policy, tasks=[...]) ... tap("eval_end", step=k, model=policy)
        around an evaluation

Optimizer steps need no tap: torch's global optimizer hooks see every one (any optimizer, wrapped or
not). A :class:`Recorder` is the tap: it compares each observation with an independent value as it
comes (the graph and the weights move on), and keeps only the numbers.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from rlbisect.check.spec import Objective, advantages, objective_loss
from rlbisect.check.copies import clone

NAN = float("nan")


@dataclass
class LossSeen:
    """One forward pass of the loss, compared with the declared objective and the step's truth."""

    step: int
    value_err: float = NAN   # |loss - declared objective of what it consumed|, relative
    grad_err: float = NAN    # |d loss / d logits - d declared / d logits| / |d declared / d logits|
    mask_wrong: float = NAN  # positions where the consumed mask differs from the sampler's
    old_err: float = NAN     # max |consumed old log-prob - the sampler's| on trained positions
    adv_err: float = NAN     # max |consumed advantage - the declared estimator of the rewards|
    ref_err: float = NAN     # max |consumed reference log-prob - the initial policy's| on trained positions
    norm_wrong: float = NAN  # |token count a token-summed loss divides by - the step's trained tokens|
    judged: bool = False     # the loss value was shown and compared with the declared objective
    declared: bool = False   # its run declared an objective (adv_err was measured)


@dataclass
class OptSeen:
    """One optimizer step, as the step's pre-hook saw it."""

    step: int                # the training step it belongs to (-1: before any was sampled)
    n: int                   # optimizer steps before it in the run
    optimizer: int           # which of the run's optimizer objects stepped (0: the first one seen)
    kind: str                # its class name
    groups: list[dict]       # each param group's values other than params
    grad_norm: float         # global norm of the gradients it is about to apply
    pre_norm: float          # their norm as the last backward left them, before any clipping (NaN: unseen)
    params: frozenset        # ids of the parameters it steps
    state_step: float        # its own step count for the first parameter (NaN when it keeps none)
    in_eval: bool            # taken between eval_begin and eval_end


@dataclass
class StepSeen:
    step: int
    tasks: Optional[list]            # task id per row
    group_size: int
    logp_gap: float                  # max |trainer log-prob at sampling - the sampler's| on sampled positions
    params: frozenset                # ids of the policy's parameters
    reward_err: float = NAN          # max |reward - the configured rule applied again| (NaN: not offered)
    logged: dict = field(default_factory=dict)   # metric -> its value recomputed from the step's batch


@dataclass
class EvalSeen:
    step: int
    tasks: list
    weights_changed: bool = False


@dataclass
class Record:
    """What a :class:`Recorder` kept of one run: numbers only, so it can come back from the forked
    child that runs it beside the step-0 checks (:mod:`rlbisect.check.run_level`)."""

    steps: list[StepSeen]
    losses: list[LossSeen]
    opt_steps: list[OptSeen]
    evals: list[EvalSeen]


@dataclass
class Recorder:
    """The tap. ``adapter`` gives the independent log-probs (``log_probs``); ``spec`` the objective
    the loss is compared with (None: that comparison is skipped)."""

    adapter: Any
    spec: Optional[Objective] = None
    sampler_logp: bool = True
    steps: list[StepSeen] = field(default_factory=list)
    losses: list[LossSeen] = field(default_factory=list)
    opt_steps: list[OptSeen] = field(default_factory=list)
    evals: list[EvalSeen] = field(default_factory=list)
    _batch: Any = None
    _truth: Any = None
    _at_sampling: Optional[torch.Tensor] = None
    _initial: Any = None
    _initial_logp: Optional[torch.Tensor] = None   # the starting policy's log-probs of this step's batch
    _eval_weights: Optional[list] = None
    _grad_sq: dict = field(default_factory=dict)   # id(param) -> |grad|^2 after its latest backward
    _hooked: list = field(default_factory=list)
    _optimizers: list = field(default_factory=list)   # every one seen stepping, kept alive: told apart by identity

    def record(self) -> Record:
        return Record(self.steps, self.losses, self.opt_steps, self.evals)

    def __call__(self, event: str, **values) -> None:
        getattr(self, "_" + event.replace("-", "_"))(**values)

    # -- sampling ------------------------------------------------------------------------------
    def _sampled(self, step: int, model, batch, truth) -> None:
        if self._initial is None:            # the reference a KL term must use: the starting policy
            self._initial = clone(model)
            self._hooked = [p.register_post_accumulate_grad_hook(self._accumulated)
                            for p in model.parameters() if p.requires_grad]
        self._batch, self._truth, self._initial_logp = batch, truth, None
        with torch.no_grad():
            self._at_sampling = self.adapter.log_probs(model, batch)
        on = truth.owned > 0
        gap = (self._at_sampling - truth.sample_logp).abs()[on] if self.sampler_logp else torch.zeros(0)
        tasks = None if truth.tasks is None else [int(t) for t in truth.tasks]
        rewards = NAN if truth.rescored is None else float((truth.rewards.float() - truth.rescored.float()).abs().max())
        groups = truth.rewards.double().view(-1, truth.group_size)
        logged = {"reward": float(groups.mean()), "zero_adv_frac": float((groups.amax(-1) == groups.amin(-1)).double().mean())}
        if gap.numel():
            logged["logp_gap"] = float(gap.double().mean())
        self.steps.append(StepSeen(step, tasks, truth.group_size, float(gap.max()) if gap.numel() else 0.0,
                                   frozenset(id(p) for p in model.parameters()), rewards, logged))

    def _accumulated(self, p: torch.Tensor) -> None:
        self._grad_sq[id(p)] = float(p.grad.detach().double().norm() ** 2) if p.grad is not None else 0.0

    # -- the loss ------------------------------------------------------------------------------
    def _loss(self, rows, mask, old_logp, advantages, loss=None, ref_logp=None, logits=None, targets=None,
              logp=None, normalizer=None, entropy=None) -> None:
        seen = LossSeen(self.steps[-1].step if self.steps else -1)
        if self.spec is not None and loss is not None:
            seen.judged = True
            seen.value_err, seen.grad_err = loss_identity(self.spec, loss, mask, old_logp, advantages, ref_logp,
                                                          logits, targets, logp, entropy)
        truth = self._truth
        if truth is not None and not _same_batch(truth.owned, rows, mask):
            # the loss consumed another batch than the step sampled (the last step's?): nothing of
            # it can be compared, and the mask check fails on it rather than this recorder raising
            seen.mask_wrong = math.inf
        elif truth is not None:
            owned = truth.owned[rows]
            on = (owned > 0) & (mask > 0)
            seen.mask_wrong = float((mask.float() != owned.float()).sum())
            if normalizer is not None:      # stated for the whole sampled batch: its trained tokens
                seen.norm_wrong = abs(float(normalizer) - float((truth.owned > 0).sum()))
            at_sampling = truth.sample_logp if self.sampler_logp else self._at_sampling
            assert at_sampling is not None, "the sampled event comes before the step's loss"
            sampled = at_sampling[rows]
            seen.old_err = _max_abs(old_logp.detach() - sampled, on)
            if self.spec is not None:
                seen.declared = True
                declared = advantages_of(truth, self.spec)[rows]
                seen.adv_err = float((advantages.detach().double() - declared).abs().max())
            if ref_logp is not None:
                if self._initial_logp is None:
                    with torch.no_grad():
                        self._initial_logp = self.adapter.log_probs(self._initial, self._batch)
                seen.ref_err = _max_abs(ref_logp.detach() - self._initial_logp[rows], on)
        self.losses.append(seen)

    # -- evaluation ------------------------------------------------------------------------------
    def _eval_begin(self, step: int, model, tasks) -> None:
        self.evals.append(EvalSeen(step, [int(t) for t in tasks]))
        self._eval_weights = [p.detach().clone() for p in model.parameters()]

    def _eval_end(self, step: int, model) -> None:
        before, self._eval_weights = self._eval_weights, None
        if before is not None and self.evals:
            after = list(model.parameters())
            self.evals[-1].weights_changed = len(after) != len(before) or \
                not all(torch.equal(a.detach(), b) for a, b in zip(after, before))

    # -- optimizer steps -------------------------------------------------------------------------
    @contextmanager
    def watching(self) -> Iterator["Recorder"]:
        """Every optimizer step in the block is recorded (:class:`OptSeen`), from the loop's first
        sampled batch on or inside an evaluation: before it, the loop is still setting up (a starting
        policy behaviour-cloned on a cold cache took 564 steps of its own and failed four checks)."""
        def before(optimizer, args, kwargs):
            if not self.steps and self._eval_weights is None:
                return
            params = [p for g in optimizer.param_groups for p in g["params"]]
            grads = [p.grad.detach().double().norm() for p in params if p.grad is not None]
            first = optimizer.state.get(params[0], {}) if params else {}
            state_step = first.get("step", NAN)
            pre, self._grad_sq = sum(self._grad_sq.values()) ** 0.5 if self._grad_sq else NAN, {}
            which = next((i for i, o in enumerate(self._optimizers) if o is optimizer), None)
            if which is None:
                which = len(self._optimizers)
                self._optimizers.append(optimizer)
            self.opt_steps.append(OptSeen(
                self.steps[-1].step if self.steps else -1, len(self.opt_steps), which, type(optimizer).__name__,
                [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups],
                float(torch.stack(grads).norm()) if grads else 0.0, pre, frozenset(id(p) for p in params),
                float(state_step), self._eval_weights is not None))
        handle = register_optimizer_step_pre_hook(before)
        try:
            yield self
        finally:
            handle.remove()
            for h in self._hooked:
                h.remove()


def _max_abs(diff: torch.Tensor, on: torch.Tensor) -> float:
    d = diff.abs()[on]
    return float(d.max()) if d.numel() else 0.0


def advantages_of(truth, spec: Objective) -> torch.Tensor:
    return advantages(truth.rewards, truth.group_size, spec)


def _grads(out: torch.Tensor, wrt: list, retain_graph: bool = False) -> list:
    """d out / d each of ``wrt``, zeros where ``out`` does not depend on it."""
    got = torch.autograd.grad(out, wrt, retain_graph=retain_graph, allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for t, g in zip(wrt, got)]


def loss_identity(spec: Objective, loss: torch.Tensor, mask, old_logp, adv, ref_logp=None, logits=None,
                  targets=None, logp=None, entropy=None) -> tuple[float, float]:
    """(value error, gradient error) of the trainer's ``loss`` against the declared objective of the
    very tensors it consumed. The gradient is taken with respect to the policy's logits (or its
    log-probs, and then the per-token ``entropy`` an entropy term consumed), without disturbing the
    trainer's graph."""
    x = logits if logits is not None else logp
    if x is None or not x.requires_grad:
        return NAN, NAN
    entropy = entropy if logits is None else None        # with logits, the objective forms its own
    inputs = [x] + ([entropy] if entropy is not None and entropy.requires_grad else [])
    g_trainer = _grads(loss, inputs, retain_graph=True)
    mine = [t.detach().clone().requires_grad_(True) for t in inputs]
    if entropy is not None:
        entropy = mine[1] if len(mine) > 1 else entropy.detach()
    ours = objective_loss(spec, mask.detach(), old_logp.detach(), adv.detach(),
                          logits=mine[0] if logits is not None else None, targets=targets,
                          logp=mine[0] if logits is None else None,
                          ref_logp=None if ref_logp is None else ref_logp.detach(), entropy=entropy)
    g_ours = _grads(ours, mine)
    value = abs(float(loss.detach()) - float(ours.detach())) / max(abs(float(ours.detach())), 1e-3)
    diff = torch.cat([(a - b).flatten() for a, b in zip(g_trainer, g_ours)])
    grad = float(diff.norm() / torch.cat([g.flatten() for g in g_ours]).norm().clamp(min=1e-12))
    return value, grad


def _same_batch(owned: torch.Tensor, rows, mask: torch.Tensor) -> bool:
    """Whether a loss's ``rows`` and ``mask`` can be rows of the step's sampled batch (``owned``)."""
    try:
        return owned[rows].shape == mask.shape
    except (IndexError, RuntimeError):
        return False
