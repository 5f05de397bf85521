"""Check 24: the learning rate the trainer's own optimizer and scheduler set, against the schedule
it declares, at every setting the probes visit; no training.

The run-level check "learning rate = the schedule at every step" reads the schedules its short runs
take. A formula they never reach (a cosine decay, where run B decays linearly) is read here: the
adapter's ``lr_schedule(total)`` builds the trainer's optimizer and scheduler and steps them
``total`` times; ``run_spec(STEPS)`` says what they should set.
"""

from __future__ import annotations

import math

from rlbisect.check.context import worst
from rlbisect.check.invariants import INVARIANTS
from rlbisect.check.results import NotApplicable
from rlbisect.check.spec import lr_factor

STEPS = 10   # training steps whose optimizer steps the schedule is read over: warmup and decay both


def _error(ctx) -> float | None:
    """max |lr - declared lr| / base lr over the run's optimizer steps (inf: another step count)."""
    offers = ctx.offers
    if offers.lr_schedule is None or offers.run_spec is None:
        return None
    spec = offers.run_spec(STEPS)
    total = spec.optimizer_steps or spec.schedule.total or STEPS
    got = [float(lr) for lr in offers.lr_schedule(total)]
    if len(got) != total:
        return math.inf
    want = [spec.lr * lr_factor(spec.schedule, n) for n in range(total)]
    return max(abs(g - w) for g, w in zip(got, want)) / spec.lr


@INVARIANTS.register("scheduler sets the declared learning rates")
def _schedule(ctx):
    if ctx.offers.lr_schedule is None or ctx.offers.run_spec is None:
        return NotApplicable("the adapter offers no lr_schedule(total) beside run_spec (see rlbisect.check.schedule)")
    return worst(ctx, _error, lambda v: v < ctx.t.lr, probes=True)
