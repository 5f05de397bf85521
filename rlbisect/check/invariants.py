"""Nine identities a correct PPO/GRPO trainer satisfies at step 0, checked on one probe batch.

Each check runs the trainer's own code through a `TrainerAdapter` and compares it with truth the
trainer cannot influence: the sampler's record of which tokens the policy sampled and with what
log-probability, a one-pass gradient, a fresh recomputation, advantages recomputed from the rewards.

    1 mask = policy tokens              positions where the loss mask disagrees with the sampler's owners
    2 sampler = trainer log-prob        max |trainer logp - sampler logp| on the masked positions
    3 ratio = 1 before any step         max |ratio - 1| in the trainer's backward of a quarter of the rows
    4 group advantage mean = 0          max |mean advantage| over groups
    5 loss invariant to padding         |loss(padded batch) - loss(batch)| on half the rows
    6 accumulated = one-pass gradient   |g_trainer - g_one_pass| / |g_one_pass| on that quarter
    7 old_logp frozen in the update     approx_kl over one real update (0 means ratio == 1 throughout)
    8 update raises log pi where A > 0  corr(change of log pi(episode), advantage) after one update
    9 KL to reference > 0 after a step  KL(policy || reference) after one update (skipped without a reference)

Checks 10-16 (`beyond.py`) cover parts of the update the chapter's nine leave unchecked, 17-20
(`objective.py`) the batch and loss against the objective the trainer declares, 21-23
(`environment.py`) the environment's contract, 24 (`schedule.py`) the learning rates its scheduler
sets; `run_level.py` watches short runs of the trainer's own loop. The probe batch they share is
`context.CheckContext`.

A check that cannot apply to a trainer (no reference model, an objective other than PPO's
clipped surrogate: the adapter's ``objective`` attribute) returns :class:`NotApplicable` and is
reported as n/a with its reason: never a failure, never dropped.

Users add their own with `@INVARIANTS.register("name")`; a registered check runs wherever the nine do.
"""

from __future__ import annotations

import math
from typing import Callable, Collection, Optional

import torch
from rlbisect.check.adapter import Offers, TrainerAdapter
from rlbisect.check.context import FLAT, CheckContext, group_advantages, masked_mean, worst  # noqa: F401 (re-exported)
from rlbisect.check.results import CheckResult, NotApplicable, as_json, over_seeds  # noqa: F401 (re-exported)
from rlbisect.check.thresholds import Thresholds
from rlbisect.errors import RlbisectError, describe, printable
from rlbisect.registry import Registry


Check = Callable[[CheckContext], "tuple[float, bool] | tuple[float, bool, str] | tuple[float, bool, str, str] | NotApplicable"]

#: Every check by name, in report order: the chapter's nine, then :mod:`.beyond`'s, then yours
#: (``@INVARIANTS.register("name")`` above ``fn(ctx) -> (value, passed)``; see rlbisect.registry).
INVARIANTS: Registry[Check] = Registry("invariant")


@INVARIANTS.register("mask = policy tokens")
def _mask(ctx):
    wrong = int((ctx.prep.mask.float() != ctx.truth.owned.float()).sum())
    return float(wrong), wrong == 0


@INVARIANTS.register("sampler = trainer log-prob")
def _sampler_logp(ctx):
    if not ctx.offers.capabilities.sampler_logp:
        return NotApplicable("the sampler records no log-probs (e.g. TRL without vLLM, unless its adapter records them)")
    on = ctx.prep.mask > 0
    gap = (ctx.trainer_logp - ctx.truth.sample_logp).abs()[on]
    value = float(gap.max()) if gap.numel() else 0.0
    return value, value < ctx.t.logp_gap


@INVARIANTS.register("ratio = 1 before any step")
def _ratio(ctx):
    stats = ctx.trainer_pass[1]
    high, low = float(stats["ratio_max"]) - 1, 1 - float(stats["ratio_min"])
    value = math.nan if math.isnan(high) or math.isnan(low) else max(high, low)   # max() drops a NaN: it fails
    return value, value < ctx.t.ratio


@INVARIANTS.register("group advantage mean = 0")
def _group_mean(ctx):
    value = float(ctx.prep.advantages.view(-1, ctx.truth.group_size).mean(-1).abs().max())
    return value, value < ctx.t.group_mean


@INVARIANTS.register("loss invariant to padding")
def _padding(ctx):
    # The gradient too, not the loss alone: at ratio 1 a per-sequence token mean is -A whichever
    # tokens its mask covers, so a mask that takes in padding leaves the loss and moves the gradient.
    padded = ctx.adapter.pad(ctx.batch, 8)
    grad, loss = ctx.gradient(ctx.batch, ctx.minibatch, ctx.prep)
    padded_grad, padded_loss = ctx.gradient(padded, ctx.minibatch, ctx.adapter.prepare(ctx.model, padded))
    moved = float((padded_grad - grad).norm() / grad.norm().clamp(min=1e-30))
    value = max(abs(padded_loss - loss), moved)
    if math.isnan(moved) or math.isnan(padded_loss - loss):   # max() would drop a NaN: it fails
        value = math.nan
    return value, value < ctx.t.padding


@INVARIANTS.register("accumulated = one-pass gradient")
def _accumulation(ctx):
    def error(at: CheckContext) -> float:
        full, accumulated = at.one_pass[0], at.trainer_pass[0]
        return float((accumulated - full).norm() / full.norm().clamp(min=1e-30))
    return worst(ctx, error, lambda v: v < ctx.t.accumulation)


@INVARIANTS.register("old_logp frozen in the update")
def _old_logp_frozen(ctx):
    if ctx.offers.capabilities.one_step_per_batch:
        return NotApplicable("one optimizer step per sampled batch: the old log-prob is the current one by design")
    value = float(ctx.stepped["stats"]["approx_kl"])
    if value > ctx.t.approx_kl:
        return value, True
    # A correct update's approx_kl is a fraction of how far the whole update moved the policy. An
    # update too small to clear the limit that way (a tiny learning rate) cannot tell a frozen
    # old_logp from a fresh one: no verdict rather than a false alarm.
    moved = (ctx.stepped["new_logp"] - ctx.trainer_logp)[ctx.truth.owned.bool()].double()
    scale = 0.5 * float(moved.pow(2).mean()) if moved.numel() else 0.0
    if scale < 100 * ctx.t.approx_kl:
        return NotApplicable(f"approx_kl {value:.3g} is under the limit {ctx.t.approx_kl:g}, but the update moved the "
                             f"policy by only {scale:.3g} (half the mean squared change of log pi): too small a step "
                             "to tell; raise the learning rate for the check, or lower approx_kl in --thresholds")
    return value, False


@INVARIANTS.register("update raises log pi where A > 0")
def _direction(ctx):
    if ctx.flat:     # no advantage to correlate with: corr would be NaN on a healthy trainer
        return NotApplicable(f"{FLAT}: no advantage for the update to follow")
    moved = ((ctx.stepped["new_logp"] - ctx.trainer_logp) * ctx.truth.owned).sum(-1)      # [B]
    adv = group_advantages(ctx.truth.rewards, ctx.truth.group_size)
    value = float(torch.corrcoef(torch.stack([moved, adv]))[0, 1])
    return value, value > ctx.t.correlation       # NaN fails


@INVARIANTS.register("KL to reference > 0 after a step")
def _kl_ref(ctx):
    ref_logp = ctx.stepped["ref_logp"]
    if ref_logp is None:
        return NotApplicable("no reference model: the trainer uses no KL term")
    if ctx.flat:     # zero advantages: a correct update need not leave the reference at all
        return NotApplicable(f"{FLAT}: a correct update has no advantage to move the policy by")
    x = (ref_logp - ctx.stepped["new_logp"]).double()     # exp(x) - x - 1 cancels in float32 for small steps
    value = float(masked_mean(x.exp() - x - 1, ctx.truth.owned))
    return value, value > ctx.t.kl_ref


# checks 10-24 register themselves here, after the nine, so the order is the report's order
from rlbisect.check import beyond, objective, environment, schedule  # noqa: E402,F401,I001 (report order)

#: rlbisect's own checks, in report order (registered above and in beyond.py)
BUILTIN = tuple(INVARIANTS.names())


def sanity_checks(adapter: TrainerAdapter, thresholds: Optional[Thresholds] = None,
                  only: Optional[Collection[str]] = None, raising: bool = False) -> dict[str, CheckResult]:
    """Run every registered invariant (every one in ``only``) on one probe batch -> {name:
    CheckResult}, in order. A check whose code raises fails with what it raised and the others
    still run; with ``raising`` the exception propagates instead (a bisect's worker tells the code
    under test's from rlbisect's own by its traceback). :class:`~rlbisect.errors.RlbisectError`
    (``CannotRun`` above all) always propagates: it says the checks cannot run, not that one failed."""
    checks = [(name, fn) for name, fn in INVARIANTS.items() if only is None or name in only]
    try:
        ctx = CheckContext(adapter, thresholds or Thresholds())
    except Exception as e:
        if raising or isinstance(e, RlbisectError):
            raise
        return {name: _raised(name, e) for name, _ in checks}     # no probe batch: no check can run
    by_design = ctx.offers.capabilities.by_design
    out = {}
    for name, fn in checks:
        try:
            got = fn(ctx)
        except Exception as e:
            if raising or isinstance(e, RlbisectError):
                raise
            out[name] = _raised(name, e)      # never by design: a check that raised measured nothing
            continue
        out[name] = (CheckResult(name, float("nan"), True, na=got.reason) if isinstance(got, NotApplicable)
                     else CheckResult(name, float(got[0]), bool(got[1]), setting=got[2] if len(got) > 2 else "",
                                      detail=got[3] if len(got) > 3 else "")
                     ).excused(by_design)
    return out


def _raised(name: str, error: Exception) -> CheckResult:
    from rlbisect.check.context import PreparedShapeError
    if isinstance(error, PreparedShapeError):     # the adapter's output does not fit the checks: no verdict
        return CheckResult(name, float("nan"), None, na=printable(str(error)))
    what = printable(describe(error))[:200]
    return CheckResult(name, float("nan"), False,
                       detail=f"raised {what} (in the adapter or the trainer code it calls)")


def check_seeds(make_adapter: Callable[[int], TrainerAdapter], seeds: list[int],
                thresholds: Optional[Thresholds] = None, runs: bool = False,
                only: Optional[Collection[str]] = None, beside: bool = True,
                raising: bool = False) -> dict[str, CheckResult]:
    """The checks (those in ``only``) on one probe batch per seed, merged (:func:`over_seeds`);
    with ``runs`` also the run-level checks (:mod:`rlbisect.check.run_level`, once: they train),
    ``beside`` the step-0 checks in a forked child when a second core is free (its runs A and B
    there, A' here after the step-0 checks). Neither reads what the other did to the adapter: the
    numbers are the same either way. ``raising``: as in :func:`sanity_checks`."""
    from rlbisect._proc.forked import started
    from rlbisect.check.run_level import finish, main_run, quiet_run, variant_run
    adapters = {seed: make_adapter(seed) for seed in seeds}
    if not runs:
        return over_seeds({seed: sanity_checks(a, thresholds, only, raising) for seed, a in adapters.items()})
    first = adapters[seeds[0]]

    def main_and_variant():
        main = main_run(first)
        return main, variant_run(first) if main.done is None else None
    later = started(main_and_variant, beside)
    try:
        out = over_seeds({seed: sanity_checks(a, thresholds, only, raising) for seed, a in adapters.items()})
        quiet = quiet_run(first)      # here while the child runs A and B: the two cores even out
    except BaseException:
        later.cancel()
        raise
    main, variant = later()
    return {**out, **finish(first, main, quiet, variant, thresholds=thresholds)}


def check_matrix(make_adapter: Callable[[Optional[str], int], TrainerAdapter], seeds: list[int],
                 thresholds: Optional[Thresholds] = None,
                 on_row: Optional[Callable[[Optional[str], dict], None]] = None, runs: bool = False,
                 jobs: int = 1, only: Optional[Collection[str]] = None,
                 fresh: bool = False) -> dict[str, dict[str, CheckResult]]:
    """The checks with no fault, then once per fault switch the adapter lists in its ``faults``
    attribute, each over the probe ``seeds`` (and with ``runs`` the run-level checks), ``jobs``
    rows at once in forked children -> {"none" | fault: {check: CheckResult}}."""
    from rlbisect.errors import InputError
    from rlbisect._proc.forked import forked_map, isolated
    # ``fresh``: the adapter's module starts threads at import (a pool's workers), which a row forked
    # after importing it here would lack, and hang: each row then imports it in its own process
    healthy = None if fresh else make_adapter(None, seeds[0])   # else read here, and checked as the first row
    faults = isolated(lambda: list(Offers.of(make_adapter(None, seeds[0])).faults)) if fresh \
        else list(Offers.of(healthy).faults)
    if not faults:
        raise InputError("--matrix runs the checks once per fault switch, and the adapter lists "
                         "none (give it a `faults` attribute)")

    def row(fault: Optional[str]) -> dict[str, CheckResult]:
        def make(seed: int):
            return healthy if healthy is not None and fault is None and seed == seeds[0] else make_adapter(fault, seed)
        return check_seeds(make, seeds, thresholds, runs, only, beside=jobs == 1)   # rows fill the cores

    def ended(fault: Optional[str], error) -> dict[str, CheckResult]:   # no check could say anything
        from rlbisect.check.run_level import RUN_CHECKS
        names = [n for n in [*INVARIANTS.names(), *(RUN_CHECKS if runs else ())] if only is None or n in only]
        why = f"the process checking this row ended ({error.how}) before its checks did"
        return {n: CheckResult(n, float("nan"), True, na=why) for n in names}
    out = {}
    for fault, results in zip([None, *faults], forked_map(row, [None, *faults], jobs, ended)):
        out[fault or "none"] = results
        if on_row is not None:
            on_row(fault, results)
    return out
