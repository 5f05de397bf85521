"""The probe batch and the trainer quantities every check shares (:class:`CheckContext`), each
computed once on demand, and :func:`worst`, which runs a check at every setting the trainer offers."""

from __future__ import annotations

import copy
from contextlib import nullcontext
from functools import cached_property
from typing import Any, Callable, Optional

import torch
from rlbisect.check.adapter import Offers, Prepared, TrainerAdapter
from rlbisect.check.copies import clone
from rlbisect.check.results import NotApplicable
from rlbisect.check.thresholds import Thresholds


MOVE = 0.2

# An all-flat batch (every reward of each group equal: a starting policy that solves none of the
# tasks, or all of them) gives a correct trainer zero advantages and no step: the checks that read
# the step or the advantage term have nothing to test, so they say so rather than fail healthy code.
FLAT = "every group in the probe batch is flat"


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


class PreparedShapeError(ValueError):
    """prepare() returned a tensor of another shape than :class:`Prepared` declares. Said once, by
    shape: left to the checks, each tripped on it inside rlbisect's own code with a message that
    blamed the trainer for a broadcast it never did."""


def _shaped(prep: Prepared, B: int, P: int) -> Prepared:
    for name, want, what in (("mask", (B, P), "[B, P]: one per position of the sampler's record"),
                             ("old_logp", (B, P), "[B, P]: one per position of the sampler's record"),
                             ("advantages", (B,), "[B]: one per episode; per-token advantages are not supported")):
        got = tuple(getattr(prep, name).shape)
        if got != want:
            raise PreparedShapeError(f"prepare() returned {name} of shape {list(got)}, expected {list(want)} ({what})")
    return prep


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
        self.cache: dict = {}
        self.setting = ""

    def at(self, label: str, adapter: TrainerAdapter) -> "CheckContext":
        """The same probe batch and policy, through ``adapter`` (the trainer at another setting)."""
        other = copy.copy(self)
        other.adapter, other.offers, other.setting, other.cache = adapter, Offers.of(adapter), label, {}
        for name in ("prep", "trainer_logp", "one_pass", "trainer_pass", "stepped", "settings", "probe_settings"):
            other.__dict__.pop(name, None)
        return other

    @cached_property
    def settings(self) -> list["CheckContext"]:
        """This context, then one per setting the adapter declares in ``variants`` (when it offers
        ``with_settings``): the paths a check whose identity holds at any setting exercises."""
        out = [self]
        if self.offers.with_settings is not None:
            out += [self.at(label, self.offers.with_settings(**settings))
                    for label, settings in self.offers.variants.items()]
        return out

    @cached_property
    def probe_settings(self) -> list["CheckContext"]:
        """:attr:`settings`, then one per ``probe_variants`` setting: where the cheap probes (the
        environment's contract, the learning-rate schedule) also look."""
        out = list(self.settings)
        if self.offers.with_settings is not None:
            out += [self.at(label, self.offers.with_settings(**settings))
                    for label, settings in self.offers.probe_variants.items()]
        return out

    @cached_property
    def prep(self) -> Prepared:
        return _shaped(self.adapter.prepare(self.model, self.batch), *self.truth.owned.shape)

    @cached_property
    def trainer_logp(self) -> torch.Tensor:                    # [B, P], a clean recomputation
        return self.adapter.log_probs(self.model, self.batch)

    @cached_property
    def one_pass(self) -> tuple[torch.Tensor, float]:          # (gradient, loss) of the microbatch, one backward
        return self.gradient(self.batch, self.microbatch, self.prep)

    def gradient(self, batch: Any, rows: torch.Tensor, prep: Prepared) -> tuple[torch.Tensor, float]:
        """(gradient, loss) of the adapter's loss of ``rows``, one backward, the model left clean."""
        self.model.zero_grad()
        loss, _ = self.adapter.loss(self.model, batch, rows, prep)
        loss.backward()
        grad = _flat_grad(self.model)
        self.model.zero_grad()
        return grad, float(loss.detach())

    @cached_property
    def moved(self) -> torch.nn.Module:
        """The policy moved a seeded, trainer-independent step away from itself (and so from a
        reference made of it): every weight plus noise of MOVE times its tensor's spread."""
        moved = clone(self.model)
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in moved.parameters():
                if p.numel() > 1:
                    p.add_(torch.randn(p.shape, generator=gen) * (MOVE * float(p.std())))
        return moved

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

        consumed: Optional[list] = [] if self.offers.tap_in_update else None

        def tap(event: str, rows, mask, old_logp, advantages, **_) -> None:
            if event == "loss" and consumed is not None:
                consumed.append([x.detach().clone() for x in (rows, mask, old_logp, advantages)])

        def update(poison: bool):
            trained = clone(self.model)
            trained.zero_grad(set_to_none=True)
            ref = self.adapter.make_ref(trained)
            seen = {}
            if consumed is not None:      # what the loss consumes, from this update only
                consumed.clear()
                seen["tap"] = tap
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

    @cached_property
    def flat(self) -> bool:
        """Every group of the sampler's rewards holds one value (the truth's, which the trainer
        cannot change; a NaN reward is never flat, so it still fails)."""
        r = self.truth.rewards.float().view(-1, self.truth.group_size)
        return bool((r == r[:, :1]).all())

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


def worst(ctx: CheckContext, value: Callable[[CheckContext], Optional[float]], ok: Callable[[float], bool],
          probes: bool = False):
    """A check at every setting (:attr:`CheckContext.settings`; with ``probes`` also
    :attr:`~CheckContext.probe_settings`) -> (value, passed, setting) of the first setting where it
    fails, else of the first one checked (``value`` None: a setting it cannot be checked at). NaN fails."""
    first = None
    for at in ctx.probe_settings if probes else ctx.settings:
        v = value(at)
        if v is None:
            continue
        if not ok(v):
            return v, False, at.setting
        first = (v, True, at.setting) if first is None else first
    return first if first is not None else NotApplicable("no setting the check could be run at")
