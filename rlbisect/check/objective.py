"""Checks 17-20: the batch and the loss against what the adapter declares (rlbisect.check.spec).

   17 each group holds one task        the rows of every group answer one task (``Truth.tasks``):
                                       the count of groups that mix tasks
   18 advantages = the declared estimator   prepare()'s advantages equal the declared estimator
                                       (``Objective.advantages``) of each row's own recorded reward:
                                       max |difference|, at every setting
   19 loss = the declared objective    old log-probs set so the ratio spreads over [0.55, 1.8] (both
                                       clip bounds bind, for both advantage signs), the loss the
                                       trainer computes for a few rows equals the declared
                                       objective of exactly what it consumed (seen through
                                       ``loss(..., tap)``), in value and in gradient with respect to
                                       the logits: the larger relative error, at every setting the
                                       adapter declares (``variants``)
   20 reference log-probs = the reference's   the reference log-probs that loss consumed equal
                                       the reference's own, recomputed (``log_probs``): max
                                       |difference| on trained positions, at every setting

Each is n/a, with its reason, where the adapter does not declare or expose what it needs.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from rlbisect.check.adapter import Prepared
from rlbisect.check.invariants import FLAT, INVARIANTS, worst
from rlbisect.check.observe import advantages_of, loss_identity
from rlbisect.check.results import NotApplicable
from rlbisect.check.spec import STATED

RATIO_SPREAD = 0.6   # |log ratio| up to 0.6: ratios from 0.55 to 1.8, past a 0.2 clip on both sides


@INVARIANTS.register("each group holds one task")
def _groups(ctx):
    tasks = ctx.truth.tasks
    if tasks is None:
        return NotApplicable("the adapter's Truth has no `tasks` (the task id of each row)")
    groups = tasks.view(-1, ctx.truth.group_size)
    mixed = int((groups != groups[:, :1]).any(-1).sum())
    return float(mixed), mixed == 0


def _declared(ctx):
    if ctx.offers.spec is None:
        why = ctx.offers.objective_why or "not as an rlbisect.check.spec.Objective"
        return NotApplicable(f"the adapter declares its objective only as {ctx.offers.objective!r}: {why}")
    return ctx.offers.spec


@INVARIANTS.register("advantages = the declared estimator")
def _advantages(ctx):
    why = _declared(ctx)
    if not any(at.offers.spec is not None for at in ctx.settings):
        return why

    def error(at) -> Optional[float]:
        if at.offers.spec is None:
            return None              # not declared at this setting: not checked there
        return float((at.prep.advantages.double() - advantages_of(at.truth, at.offers.spec)).abs().max())
    return worst(ctx, error, lambda v: v < ctx.t.group_mean)      # NaN fails


def _seen_loss(ctx) -> dict:
    """One loss of a few rows of a policy moved away from its reference, with the ratio spread past
    the clip range, and what that loss consumed."""
    if "loss" in ctx.cache:
        return ctx.cache["loss"]
    rows, moved = ctx.few_rows(2), ctx.moved
    old = torch.zeros_like(ctx.truth.sample_logp)
    gen = torch.Generator().manual_seed(0)
    old[rows] = _log_probs(ctx, moved, rows) - (torch.rand(old[rows].shape, generator=gen) * 2 - 1) * RATIO_SPREAD
    prep = Prepared(ctx.prep.mask, old, ctx.prep.advantages)
    spec = ctx.offers.spec
    # the reference is the starting policy: the KL terms and their gradients are away from 0
    ref = ctx.adapter.make_ref(ctx.model) if spec is not None and spec.kl_coef and ctx.offers.ref_in_loss else None
    seen: list[dict] = []
    extra = {"ref": ref} if ref is not None else {}
    ctx.adapter.loss(moved, ctx.batch, rows, prep, tap=lambda event, **v: seen.append(v) if event == "loss" else None,
                     **extra)
    ctx.cache["loss"] = {"rows": rows, "seen": seen[-1] if seen else None, "ref": ref}
    return ctx.cache["loss"]


def _log_probs(ctx, model, rows: torch.Tensor) -> torch.Tensor:
    """The trainer's log-probs of ``rows`` (of those rows only, when its log_probs takes ``rows``)."""
    with torch.no_grad():
        if ctx.offers.rows_in_log_probs:
            return ctx.adapter.log_probs(model, ctx.batch, rows=rows)
        return ctx.adapter.log_probs(model, ctx.batch)[rows]


def _needs_tap(ctx):
    spec = _declared(ctx)
    if isinstance(spec, NotApplicable):
        return spec
    if spec.kind not in STATED:
        return NotApplicable(f"the objective is {spec.kind}: only {', '.join(STATED)} are stated exactly")
    if not ctx.offers.tap_in_loss:
        return NotApplicable("the adapter's loss() takes no `tap`, so what it consumes cannot be seen")
    if ctx.flat:     # the probe loss is taken over rows with A != 0, and there are none
        return NotApplicable(f"{FLAT}: no row with an advantage for the loss to be checked on")
    return None


@INVARIANTS.register("loss = the declared objective")
def _objective(ctx):
    if (why := _needs_tap(ctx)) is not None:
        return why

    def error(at) -> Optional[float]:
        if at.offers.spec is None or at.offers.spec.kind not in STATED:
            return None              # not declared exactly at this setting: not checked there
        got = _seen_loss(at)["seen"]
        if got is None:
            return float("nan")      # the loss never showed the tap what it consumed
        value, grad = loss_identity(at.offers.spec, got["loss"], got["mask"], got["old_logp"], got["advantages"],
                                    got.get("ref_logp"), got.get("logits"), got.get("targets"), got.get("logp"),
                                    got.get("entropy"))
        return math.nan if math.isnan(value) or math.isnan(grad) else max(value, grad)   # max() drops a NaN
    return worst(ctx, error, lambda v: v < ctx.t.objective)


@INVARIANTS.register("reference log-probs = the reference's")
def _reference(ctx):
    if (why := _needs_tap(ctx)) is not None:
        return why
    if not any(at.offers.spec is not None and at.offers.spec.kl_coef for at in ctx.settings):
        return NotApplicable("no KL term at any setting checked: no reference log-probs are consumed")

    def error(at) -> Optional[float]:
        if at.offers.spec is None:
            return None              # not declared at this setting: not checked there
        got = _seen_loss(at)
        if got["ref"] is None:
            return 0.0              # no KL term at this setting
        if got["seen"] is None or got["seen"].get("ref_logp") is None:
            return float("nan")     # a KL term, but the loss showed no reference log-probs
        own = _log_probs(at, got["ref"], got["rows"])
        on = got["seen"]["mask"] > 0
        diff = (got["seen"]["ref_logp"].detach() - own).abs()[on]
        return float(diff.max()) if diff.numel() else 0.0
    return worst(ctx, error, lambda v: v < ctx.t.logp_gap)
