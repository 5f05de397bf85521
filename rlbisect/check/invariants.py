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

Checks 10-14 (`beyond.py`) cover parts of the update the chapter's nine leave unchecked.

A check that cannot apply to a trainer (no reference model, an objective other than PPO's
clipped surrogate: the adapter's ``objective`` attribute) returns :class:`NotApplicable` and is
reported as n/a with its reason: never a failure, never dropped.

Users add their own with `@INVARIANTS.register("name")`; a registered check runs wherever the nine do.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from functools import cached_property
from typing import Callable, Optional

import torch
from rlbisect.check.adapter import Offers, Prepared, TrainerAdapter
from rlbisect.check.results import CheckResult, NotApplicable, as_json, over_seeds  # noqa: F401 (re-exported)
from rlbisect.check.thresholds import Thresholds
from rlbisect.registry import Registry


def _flat_grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in model.parameters()])


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def group_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Reference advantages from the rewards alone: (r - group mean) / group std."""
    r = rewards.float().view(-1, group_size)
    return ((r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-6)).flatten()


class CheckContext:
    """One probe batch and the trainer quantities the checks share, each computed once, on demand."""

    def __init__(self, adapter: TrainerAdapter, thresholds: Thresholds):
        self.adapter, self.t = adapter, thresholds
        self.offers = Offers.of(adapter)
        self.model = adapter.policy()
        self.batch, self.truth = adapter.probe_batch()
        B = len(self.truth.rewards)
        self.rows = torch.arange(B)
        # Padding, accumulation and the first-step ratio are properties of any one minibatch. Padding
        # is checked on a seeded random half of the rows (a quarter was too few for a padded mean to
        # show on every probe seed of the second trainer), the two gradient checks on a quarter, to
        # stay within 3x an update; both hold the episode whose policy tokens reach furthest right:
        # the batch's right edge is where a shifted mask and padding interact.
        order = torch.randperm(B, generator=torch.Generator().manual_seed(0))
        positions = torch.arange(1, self.truth.owned.shape[1] + 1)
        furthest = torch.tensor([int(((self.truth.owned > 0) * positions).amax(-1).argmax())])

        def holding(rows: torch.Tensor) -> torch.Tensor:
            return rows if furthest in rows else torch.cat([rows[:-1], furthest])
        self.minibatch = holding(order[: max(B // 2, 1)])
        self.microbatch = holding(order[: max(B // 4, 1)])

    @cached_property
    def prep(self) -> Prepared:
        return self.adapter.prepare(self.model, self.batch)

    @cached_property
    def trainer_logp(self) -> torch.Tensor:                    # [B, P], a clean recomputation
        return self.adapter.log_probs(self.model, self.batch)

    @cached_property
    def one_pass(self) -> tuple[torch.Tensor, float]:          # (gradient, loss) of the microbatch, one backward
        self.model.zero_grad()
        loss, _ = self.adapter.loss(self.model, self.batch, self.microbatch, self.prep)
        loss.backward()
        grad = _flat_grad(self.model)
        self.model.zero_grad()
        return grad, float(loss.detach())

    @cached_property
    def trainer_pass(self) -> tuple[torch.Tensor, dict]:       # (gradient, stats) by the trainer's backward
        self.model.zero_grad()
        stats = self.adapter.backward(self.model, self.batch, self.microbatch, self.prep)
        grad = _flat_grad(self.model)
        self.model.zero_grad()
        return grad, stats

    @cached_property
    def stepped(self) -> dict:
        """One real update on a copy, with the trainer's own reference model; ``leaks`` counts its
        optimizer steps that read gradient spent by the step before (:mod:`.optim_probe`)."""
        from rlbisect.check.optim_probe import StepLeaks, spent_gradients_poisoned

        consumed: Optional[list] = [] if self.offers.observe_in_update else None

        def update(poison: bool):
            trained = copy.deepcopy(self.model)
            trained.zero_grad(set_to_none=True)
            ref = self.adapter.make_ref(trained)
            seen = {}
            if consumed is not None:      # what the loss consumes, from this update only
                consumed.clear()
                seen["observe"] = lambda *t: consumed.append([x.detach().clone() for x in t])
            with spent_gradients_poisoned() if poison else nullcontext(StepLeaks()) as leaks:
                stats = self.adapter.update(trained, self.batch, ref, **seen)
            return trained, ref, stats, leaks
        trained, ref, stats, leaks = update(poison=True)
        if leaks.leaked:       # the poison reached the weights: the other checks get a clean update
            trained, ref, stats, _ = update(poison=False)
        trained.zero_grad(set_to_none=True)
        new_logp = self.adapter.log_probs(trained, self.batch)
        if ref is None or ref is trained:
            ref_logp = None if ref is None else new_logp
        elif _same_weights(ref, self.model):      # a frozen copy of step 0: its log-probs are known
            ref_logp = self.trainer_logp
        else:
            ref_logp = self.adapter.log_probs(ref, self.batch)
        return {"stats": stats, "new_logp": new_logp, "ref_logp": ref_logp, "model": trained, "ref": ref,
                "leaks": leaks, "consumed": consumed}

    def few_rows(self, n: int = 2) -> torch.Tensor:
        """Up to n rows of the microbatch with A > 0 and n with A < 0: enough to see a gradient
        term, at a fraction of a minibatch's cost."""
        adv = self.prep.advantages
        rows = self.microbatch.tolist()
        return torch.tensor([r for r in rows if adv[r] > 0][:n] + [r for r in rows if adv[r] < 0][:n],
                            dtype=torch.long)

    def term_gradient(self, model: torch.nn.Module, rows: torch.Tensor, with_term: tuple[Prepared, dict],
                      without: tuple[Prepared, dict]) -> torch.Tensor:
        """The gradient of one term of the trainer's loss of ``rows``: the loss with it minus the
        loss without it (each a (prep, loss kwargs) pair), in one backward."""
        model.zero_grad()
        (self.adapter.loss(model, self.batch, rows, with_term[0], **with_term[1])[0]
         - self.adapter.loss(model, self.batch, rows, without[0], **without[1])[0]).backward()
        grad = _flat_grad(model)
        model.zero_grad()
        return grad


Check = Callable[[CheckContext], "tuple[float, bool] | NotApplicable"]
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
    value = max(stats["ratio_max"] - 1, 1 - stats["ratio_min"])
    return float(value), value < ctx.t.ratio


@INVARIANTS.register("group advantage mean = 0")
def _group_mean(ctx):
    value = float(ctx.prep.advantages.view(-1, ctx.truth.group_size).mean(-1).abs().max())
    return value, value < ctx.t.group_mean


@INVARIANTS.register("loss invariant to padding")
def _padding(ctx):
    padded = ctx.adapter.pad(ctx.batch, 8)
    with torch.no_grad():
        loss, _ = ctx.adapter.loss(ctx.model, ctx.batch, ctx.minibatch, ctx.prep)
        padded_loss, _ = ctx.adapter.loss(ctx.model, padded, ctx.minibatch, ctx.adapter.prepare(ctx.model, padded))
    value = abs(float(padded_loss) - float(loss))
    return value, value < ctx.t.padding


@INVARIANTS.register("accumulated = one-pass gradient")
def _accumulation(ctx):
    full, accumulated = ctx.one_pass[0], ctx.trainer_pass[0]
    value = float((accumulated - full).norm() / full.norm().clamp(min=1e-30))
    return value, value < ctx.t.accumulation


@INVARIANTS.register("old_logp frozen in the update")
def _old_logp_frozen(ctx):
    if ctx.offers.capabilities.one_step_per_batch:
        return NotApplicable("one optimizer step per sampled batch: the old log-prob is the current one by design")
    value = float(ctx.stepped["stats"]["approx_kl"])
    return value, value > ctx.t.approx_kl


@INVARIANTS.register("update raises log pi where A > 0")
def _direction(ctx):
    moved = ((ctx.stepped["new_logp"] - ctx.trainer_logp) * ctx.truth.owned).sum(-1)      # [B]
    adv = group_advantages(ctx.truth.rewards, ctx.truth.group_size)
    value = float(torch.corrcoef(torch.stack([moved, adv]))[0, 1])
    return value, value > ctx.t.correlation       # NaN (no reward variance in the batch) fails


@INVARIANTS.register("KL to reference > 0 after a step")
def _kl_ref(ctx):
    ref_logp = ctx.stepped["ref_logp"]
    if ref_logp is None:
        return NotApplicable("no reference model: the trainer uses no KL term")
    x = (ref_logp - ctx.stepped["new_logp"]).double()     # exp(x) - x - 1 cancels in float32 for small steps
    value = float(masked_mean(x.exp() - x - 1, ctx.truth.owned))
    return value, value > ctx.t.kl_ref


# checks 10-12 register themselves here, after the nine, so the order is the report's order
from rlbisect.check import beyond  # noqa: E402,F401

#: rlbisect's own checks, in report order (registered above and in beyond.py)
BUILTIN = tuple(INVARIANTS.names())


def sanity_checks(adapter: TrainerAdapter, thresholds: Optional[Thresholds] = None) -> dict[str, CheckResult]:
    """Run every registered invariant on one probe batch -> {name: CheckResult}, in order."""
    ctx = CheckContext(adapter, thresholds or Thresholds())
    by_design = ctx.offers.capabilities.by_design
    out = {}
    for name, fn in INVARIANTS.items():
        got = fn(ctx)
        out[name] = CheckResult(name, float("nan"), True, na=got.reason) if isinstance(got, NotApplicable) \
            else CheckResult(name, float(got[0]), bool(got[1]))
        if not out[name].passed and name in by_design:    # shown with its explanation, not as FAIL
            out[name] = CheckResult(name, out[name].value, True, by_design=by_design[name])
    return out


def check_seeds(make_adapter: Callable[[int], TrainerAdapter], seeds: list[int],
                thresholds: Optional[Thresholds] = None, runs: bool = False) -> dict[str, CheckResult]:
    """The checks on one probe batch per seed, merged (:func:`over_seeds`); with ``runs`` then
    the run-level checks (:mod:`rlbisect.check.run_level`, once: they train)."""
    from rlbisect.check.run_level import run_checks
    adapters = {seed: make_adapter(seed) for seed in seeds}
    out = over_seeds({seed: sanity_checks(a, thresholds) for seed, a in adapters.items()})
    return {**out, **run_checks(adapters[seeds[0]])} if runs else out


def check_matrix(make_adapter: Callable[[Optional[str], int], TrainerAdapter], seeds: list[int],
                 thresholds: Optional[Thresholds] = None,
                 on_row: Optional[Callable[[Optional[str], dict], None]] = None, runs: bool = False,
                 jobs: int = 1) -> dict[str, dict[str, CheckResult]]:
    """The checks with no fault, then once per fault switch the adapter lists in its ``faults``
    attribute, each over the probe ``seeds`` (and with ``runs`` the run-level checks), ``jobs``
    rows at once in forked children -> {"none" | fault: {check: CheckResult}}."""
    from rlbisect.errors import InputError
    from rlbisect._proc.forked import forked_map
    healthy = make_adapter(None, seeds[0])      # read for its fault list, then checked as the first row
    faults = list(Offers.of(healthy).faults)
    if not faults:
        raise InputError("--matrix runs the checks once per fault switch, and the adapter lists "
                         "none (give it a `faults` attribute)")

    def row(fault: Optional[str]) -> dict[str, CheckResult]:
        def make(seed: int):
            return healthy if fault is None and seed == seeds[0] else make_adapter(fault, seed)
        return check_seeds(make, seeds, thresholds, runs)
    out = {}
    for fault, results in zip([None, *faults], forked_map(row, [None, *faults], jobs)):
        out[fault or "none"] = results
        if on_row is not None:
            on_row(fault, results)
    return out
