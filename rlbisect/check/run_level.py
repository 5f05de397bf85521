"""Run-level checks: a few real steps of the trainer's own loop, watched (rlbisect.check.observe).

Short runs through the adapter's ``train_run``: A, ``STEPS`` steps at the configured setting
evaluating every step; A', the same never evaluating; B, ``VARIANT_STEPS`` steps with the next seed
at the adapter's ``run_variant`` (by default every setting in ``variants`` at once: a temperature
!= 1, another KL estimator, several microbatches and epochs, a schedule, a binding gradient clip,
...). What each
step samples, what every loss consumes, every optimizer step and every evaluation are compared
with the sampler's record and the adapter's declarations (``run_spec``, ``objective``):

    sampler = trainer log-prob, every step      the trainer's log-probs at sampling time = the sampler's
    old log-probs = the sampler's, every minibatch   what each loss uses as its ratio's denominator
    mask and advantages = the step's batch      what each loss consumes: the sampler's policy tokens,
                                                the declared estimator of each episode's reward, and
                                                (where shown) the token count it divides by
    reference log-probs = the starting policy's  the KL term's reference is the policy at step 0
    loss = the declared objective, every minibatch   in value and gradient, at the real ratios
    each step draws distinct training tasks     one task per group, no task twice, none held out
    the task stream moves with steps and seeds  consecutive steps differ; seeds s and s + 1 differ
    evaluation: held-out tasks, weights untouched   no training task, no weight change, no step
    optimizer = the configured one              its class, hyperparameters and parameters
    gradients clipped to max_grad_norm before each step   the norm each step applies: at most the
                                                limit, the limit itself when the backward is far above it
    learning rate = the schedule at every step  the param groups' lr = the declared schedule
    optimizer state persists across steps       one optimizer throughout, its step count continuing
    same seed, same rows                        A and A' log the same training rows, bit for bit
    evaluation leaves training alone            (a third run tells these two apart when they differ)

An adapter whose ``train_run`` takes no ``tap`` gets the last three from the rows and torch's
optimizer hooks; what needs a tap or a declaration it does not make is n/a, with the reason.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

from rlbisect.check import loop
from rlbisect.check.adapter import Offers
from rlbisect.check.observe import Recorder
from rlbisect.check.results import CheckResult, NotApplicable
from rlbisect.check.thresholds import Thresholds
from rlbisect.metrics import is_timing
from rlbisect.errors import CannotRun

# Three steps: what an evaluation at step 1 (every step, against at 0 and the last only) drew from
# the training stream shows at step 2. The off-default run needs two: its second step samples
# after an update, from a stream the first moved.
STEPS, VARIANT_STEPS = 3, 2
NEVER = 10 ** 6    # an eval_every that never comes (the last step may still evaluate)
RAN = "short runs complete"
RUN_CHECKS = (RAN, *loop.CHECKS, "same seed, same rows", "evaluation leaves training alone")


def _differing(a: list[dict], b: list[dict], skip_eval: bool) -> int:
    """Values that differ between two runs, row by row, over the keys both log."""
    n = abs(len(a) - len(b))
    for ra, rb in zip(a, b):
        for key in set(ra) & set(rb):
            if is_timing(key) or (skip_eval and key.startswith("eval")):
                continue
            n += ra[key] != rb[key] and not (ra[key] != ra[key] and rb[key] != rb[key])   # NaN == NaN
    return n


def _repeatable(rows: list[dict], quiet: list[dict], rerun: Callable[[], list[dict]]) -> dict[str, CheckResult]:
    """Same seed, same rows; evaluation leaves training alone: A vs A' (evaluation at the end only),
    and when they differ ``rerun`` (A again) to tell which."""
    names = RUN_CHECKS[-2:]
    if _differing(rows, quiet, skip_eval=True) == 0:
        return {n: CheckResult(n, 0.0, True) for n in names}
    again = _differing(rows, rerun(), skip_eval=False)
    left_alone = _differing(rows, quiet, skip_eval=True) if again == 0 else 0
    return {names[0]: CheckResult(names[0], float(again), again == 0),
            names[1]: CheckResult(names[1], float(left_alone), left_alone == 0,
                                  na="" if again == 0 else "runs with one seed differ: evaluation cannot be told apart")}


class Split(NamedTuple):
    """The run-level checks but the last two, and what those two need (``rows``: run A's; None when
    ``results`` are already all of them: n/a, rows only, or a run that raised)."""
    results: dict[str, CheckResult]
    rows: Optional[list[dict]] = None
    evaluates: bool = False


def run_checks(adapter: Any, seed: int = 0, thresholds: Optional[Thresholds] = None) -> dict[str, CheckResult]:
    """The run-level checks on ``adapter``'s trainer -> {name: CheckResult}: :func:`main_runs`,
    then :func:`finish` with run A' (`check_seeds` runs the two in different processes)."""
    return finish(adapter, main_runs(adapter, seed, thresholds), quiet_run(adapter, seed))


def _watched(at: Any, caps: Any, run_seed: int, eval_every: int, steps: int = STEPS) -> tuple[Recorder, list[dict]]:
    offers = Offers.of(at)
    assert offers.train_run is not None    # main_runs answers without runs when there is none
    rec = Recorder(at, offers.spec, caps.sampler_logp)
    with rec.watching():
        rows = offers.train_run(steps, run_seed, eval_every, tap=rec)
    return rec, rows


def main_runs(adapter: Any, seed: int = 0, thresholds: Optional[Thresholds] = None) -> Split:
    """Runs A and B, watched, and every check but the last two."""
    t = thresholds or Thresholds()
    offers = Offers.of(adapter)
    if offers.train_run is None:
        why = f"{type(adapter).__name__} has no train_run(steps, seed, eval_every)"
        return Split({name: CheckResult(name, float("nan"), True, na=why) for name in RUN_CHECKS})
    if not offers.tap_in_runs:
        return Split(_rows_only(offers.train_run, seed))
    caps, with_settings = offers.capabilities, offers.with_settings
    variant = offers.run_variant if with_settings is not None else {}
    # run B goes through the variant's own adapter (with_settings keeps its settings); asking the
    # first adapter for a run at the variant's settings built that trainer twice more
    ats = [adapter]
    try:
        runs = [_watched(adapter, caps, seed, 1)]
        if variant and with_settings is not None:
            ats.append(with_settings(**variant))
            runs.append(_watched(ats[1], caps, seed + 1, NEVER, VARIANT_STEPS))
    except CannotRun:
        raise                   # the adapter does not fit this code: exit 125 / skip, not a finding
    except Exception as e:      # noqa: BLE001 - the trainer's own loop raised: that is the finding
        return Split(_raised(e))
    specs = [spec(n, None) if (spec := Offers.of(at).run_spec) else None
             for at, n in zip(ats, (STEPS, VARIANT_STEPS))]
    out = loop.judge([r for r, _ in runs], specs, t, offers)
    out[RAN] = CheckResult(RAN, 0.0, True)
    return Split(out, runs[0][1], bool(runs[0][0].evals))


def quiet_run(adapter: Any, seed: int = 0) -> "list[dict] | Exception":
    """Run A' for the last two checks: A's seed and length, never evaluating (a schedule depends on
    the run's length), no tap to pay for -> its rows, or what its loop raised."""
    offers = Offers.of(adapter)
    if offers.train_run is None or not offers.tap_in_runs:
        return []               # main_runs answers every check without it
    try:
        return offers.train_run(STEPS, seed, NEVER)
    except CannotRun:
        raise
    except Exception as e:      # noqa: BLE001 - the trainer's own loop raised: that is the finding
        return e


def finish(adapter: Any, split: Split, quiet: "list[dict] | Exception", seed: int = 0) -> dict[str, CheckResult]:
    """All the run-level checks from :func:`main_runs`' and :func:`quiet_run`'s results."""
    if split.rows is None:
        return split.results
    if isinstance(quiet, Exception):
        return _raised(quiet)
    caps = Offers.of(adapter).capabilities
    out = {**split.results, **_repeatable(split.rows, quiet, lambda: _watched(adapter, caps, seed, 1)[1])}
    if not split.evaluates:
        out[RUN_CHECKS[-1]] = CheckResult(RUN_CHECKS[-1], float("nan"), True,
                                          na="the loop never showed its tap an evaluation")
    return {name: out[name] for name in RUN_CHECKS}


def _raised(e: Exception) -> dict[str, CheckResult]:
    """A run that raised: it fails the first check, with what it raised; the others cannot say."""
    from rlbisect.errors import printable
    what = printable(f"{type(e).__name__}: {e}".splitlines()[0])[:200]
    out = {name: CheckResult(name, float("nan"), True, na="a short run raised (see above)") for name in RUN_CHECKS}
    out[RAN] = CheckResult(RAN, 1.0, False, detail=f"the trainer's loop raised {what}")
    return out


def _rows_only(train: Callable[..., list[dict]], seed: int) -> dict[str, CheckResult]:
    """Without a tap: the run's rows and torch's optimizer hooks only."""
    from rlbisect.check.optim_probe import optimizers_stepped
    try:
        with optimizers_stepped() as many:
            rows = train(STEPS, seed, 1)
        with optimizers_stepped() as first:
            train(1, seed, NEVER)
        quiet = train(STEPS, seed, NEVER)
    except CannotRun:
        raise                   # the adapter does not fit this code: exit 125 / skip, not a finding
    except Exception as e:      # noqa: BLE001 - the trainer's own loop raised: that is the finding
        return _raised(e)
    why = "the adapter's train_run() takes no `tap` and `settings`, so its steps cannot be watched"
    out = {name: CheckResult(name, float("nan"), True, na=why) for name in RUN_CHECKS}
    out[RAN] = CheckResult(RAN, 0.0, True)
    name = "optimizer state persists across steps"
    added = len(many) - len(first)
    out[name] = (CheckResult(name, float(added), added == 0) if first else
                 CheckResult(name, float("nan"), True, na="no torch.optim optimizer took a step"))
    out.update(_repeatable(rows, quiet, lambda: train(STEPS, seed, 1)))
    return out


__all__ = ["RUN_CHECKS", "STEPS", "NotApplicable", "run_checks"]
