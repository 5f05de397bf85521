"""Checks 10-16: parts of the update the nine classic identities leave unchecked.

   10 clip stops the gradient outside 1 +- eps   with old log-probs set so ratio = e (A > 0) or 1/e
                                        (A < 0), the advantage term's gradient must vanish:
                                        |g(A) - g(0)| / |g_minibatch|
   11 KL term pulls toward the reference   after one update, a small step along the KL term's
                                        gradient (the loss with the reference minus without, A = 0)
                                        must lower KL(policy || reference): its relative
                                        decrease (n/a without a reference, or when the adapter's
                                        `loss` takes no `ref`)
   12 advantages depend only on their own group   the first group's rewards replaced: every other
                                        group's advantage unchanged (n/a without the adapter's
                                        `with_rewards(batch, rewards)`)
   13 every sampled token is trained on   per row, the loss mask's size equals the tokens the
                                        sampler drew from the policy (counted where it draws, apart
                                        from the owner tags check 1 trusts): |difference| summed
                                        over rows the mask keeps (n/a without ``Truth.drawn``)
   14 each optimizer step sees only its own gradient   in check 7's update, the optimizer steps
                                        that read gradient spent by the step before (zero_grad
                                        forgotten); n/a with one optimizer step per update
   15 the update consumes what prepare() returns   in check 7's update, the mask, old log-probs
                                        and advantages its loss is handed (the adapter's
                                        ``update(..., tap)``) equal prepare()'s, which checks
                                        1-12 read: max difference (n/a when update takes no `tap`)
   16 rewards = the configured reward rule   the rewards the batch carries equal the configured
                                        reward rule applied again to each episode's record
                                        (``Truth.rescored``): max |difference| (n/a without it)

Each returns :class:`NotApplicable` with its reason where the trainer has nothing it could test.
"""

from __future__ import annotations


import torch

from rlbisect.check.adapter import Prepared
from rlbisect.check.copies import clone
from rlbisect.check.invariants import FLAT, INVARIANTS, masked_mean
from rlbisect.check.results import NotApplicable


@INVARIANTS.register("clip stops the gradient outside 1 +- eps")
def _clip(ctx):
    if ctx.offers.objective != "ppo-clip":     # the default when an adapter does not say
        return NotApplicable(f"the objective is {ctx.offers.objective}, not PPO's clipped surrogate: "
                             "it keeps a gradient outside the clip range by design")
    rows = ctx.few_rows(1)
    if not len(rows):
        return NotApplicable(f"{FLAT}: no advantage term to clip")
    adv = ctx.prep.advantages
    # old = logp - sign(A): ratio e where A > 0, 1/e where A < 0, outside any sane clip range, on
    # the side where PPO's min() keeps the clipped (constant) term
    old = ctx.trainer_logp - torch.sign(adv)[:, None]
    leak = ctx.term_gradient(ctx.model, rows, (Prepared(ctx.prep.mask, old, adv), {}),
                             (Prepared(ctx.prep.mask, old, torch.zeros_like(adv)), {})).norm()
    value = float(leak / ctx.one_pass[0].norm().clamp(min=1e-30))
    return value, value < ctx.t.clip_leak


# Small enough to stay linear (the KL decrease scaled 10x per decade of step from 1e-6 to 1e-4 on
# TinyAgent; at 1e-3 it overshoots and can rise), large enough to stand above float noise.
KL_STEP = 1e-5


@INVARIANTS.register("KL term pulls toward the reference")
def _kl_pull(ctx):
    ref, trained = ctx.stepped["ref"], ctx.stepped["model"]
    if ref is None:
        return NotApplicable("no reference model: the trainer uses no KL term")
    if not ctx.offers.ref_in_loss:
        return NotApplicable("the adapter's loss() takes no `ref`, so its KL term cannot be asked for")
    if ctx.offers.spec is not None and ctx.offers.spec.kl_estimator == "k1":
        return NotApplicable("the declared KL estimator is k1 (log ratio), whose sampled gradient has mean 0 "
                             "at the sampler's policy: it need not pull on one batch (check 19 checks its value "
                             "and gradient)")
    if ctx.flat:     # the update had nothing to move the policy by: it still sits on the reference
        return NotApplicable(f"{FLAT}: the update left the policy at the reference, no KL to pull back")
    rows = ctx.minibatch[:4]
    mask = ctx.truth.owned[rows]

    def kl(logp: torch.Tensor) -> float:          # logp: the rows' log-probs
        x = (ctx.stepped["ref_logp"][rows] - logp).double()   # float32 cancels at small steps
        return float(masked_mean(x.exp() - x - 1, mask))
    # the KL term's own gradient: the loss with the reference minus without (A = 0 both), so an
    # entropy term or any other regularizer cancels out
    prep = Prepared(ctx.prep.mask, ctx.stepped["new_logp"], torch.zeros_like(ctx.prep.advantages))
    g = ctx.term_gradient(trained, rows, (prep, {"ref": ref}), (prep, {}))
    before = kl(ctx.stepped["new_logp"][rows])
    moved = clone(trained)
    with torch.no_grad():                         # a small step, scale-free: KL_STEP of the weights' norm
        flat = torch.cat([p.flatten() for p in moved.parameters()])
        size = KL_STEP * flat.norm()
        pairs = list(zip(trained.parameters(), ref.parameters()))
        if len(pairs) == len(list(trained.parameters())) == len(list(ref.parameters())) and \
                all(a.shape == b.shape for a, b in pairs):
            # at most a tenth of the way back to the reference: a small update (TRL's default lr
            # 1e-6) leaves the policy closer to it than KL_STEP, which would overshoot
            size = min(size, 0.1 * torch.sqrt(sum(((a - b).double() ** 2).sum() for a, b in pairs)).float())
        step = g * (size / g.norm().clamp(min=1e-30))
        i = 0
        for p in moved.parameters():
            p -= step[i:i + p.numel()].view_as(p)
            i += p.numel()
    if ctx.offers.rows_in_log_probs:
        after = kl(ctx.adapter.log_probs(moved, ctx.batch, rows=rows))
    else:
        after = kl(ctx.adapter.log_probs(moved, ctx.batch)[rows])
    value = (before - after) / max(before, 1e-30)
    return value, value > ctx.t.kl_pull


@INVARIANTS.register("advantages depend only on their own group")
def _group_local(ctx):
    with_rewards = ctx.offers.with_rewards
    G, B = ctx.truth.group_size, len(ctx.truth.rewards)
    if with_rewards is None:
        return NotApplicable("the adapter has no with_rewards(batch, rewards)")
    if B <= G:
        return NotApplicable("one group in the probe batch: nothing to keep apart")
    # the first group's rewards replaced by a spread ten times wider: a group-relative advantage
    # (GRPO, Dr. GRPO, RLOO) leaves every other group's advantages exactly as they were
    rewards = ctx.truth.rewards.clone().float()
    rewards[:G] = 10.0 * torch.arange(G, dtype=torch.float) + 3.0
    moved = ctx.adapter.prepare(ctx.model, with_rewards(ctx.batch, rewards)).advantages
    value = float((moved[G:] - ctx.prep.advantages[G:]).abs().max())
    return value, value < ctx.t.group_local       # NaN fails


@INVARIANTS.register("every sampled token is trained on")
def _drawn(ctx):
    drawn = ctx.truth.drawn
    if drawn is None:
        return NotApplicable("the adapter's Truth has no `drawn` counts (tokens the sampler drew per row)")
    trained = ctx.prep.mask.float().sum(-1)
    kept = trained > 0     # a row left out whole (overlong filtering) is the trainer's choice, not a lost token
    value = float((trained - drawn.float()).abs()[kept].sum())
    return value, value == 0


@INVARIANTS.register("each optimizer step sees only its own gradient")
def _grad_leak(ctx):
    leaks = ctx.stepped["leaks"]
    if leaks.steps < 2:
        return NotApplicable("one optimizer step per update: no step inside it can read another's "
                             "gradient (a leak across updates shows as grad_norm climbing)")
    return float(leaks.leaked), leaks.leaked == 0


@INVARIANTS.register("the update consumes what prepare() returns")
def _consumed(ctx):
    seen = ctx.stepped["consumed"]
    if seen is None:
        return NotApplicable("the adapter's update() takes no `tap`, so what its loss consumes cannot be seen")
    if not seen:
        return NotApplicable("the update never showed its tap a loss")
    prep, worst = ctx.prep, []
    for rows, mask, old, adv in seen:
        on = prep.mask[rows] > 0
        worst += [(mask != prep.mask[rows]).sum().float(), (adv - prep.advantages[rows]).abs().max().float(),
                  (old - prep.old_logp[rows]).abs()[on].max().float() if on.any() else torch.tensor(0.0)]
    value = float(torch.stack(worst).max())      # torch's max keeps a NaN (Python's would drop it)
    return value, value < ctx.t.consumed      # NaN fails


@INVARIANTS.register("rewards = the configured reward rule")
def _rewards(ctx):
    again = ctx.truth.rescored
    if again is None:
        return NotApplicable("the adapter's Truth has no `rescored` rewards (the configured reward rule applied again)")
    value = float((ctx.truth.rewards.float() - again.float()).abs().max())
    return value, value == 0
