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
    logged metrics = the step's batch           run A's rows: reward, zero_adv_frac and logp_gap as
                                                recomputed from each step's batch
    same seed, same rows                        A and A' log the same training rows, bit for bit
    evaluation leaves training alone            (a third run tells these two apart when they differ)

An adapter whose ``train_run`` takes no ``tap`` gets the last three from the rows and torch's
optimizer hooks; what needs a tap or a declaration it does not make is n/a, with the reason.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Union

from rlbisect.check import loop
from rlbisect.check.adapter import Offers
from rlbisect.check.observe import Record, Recorder
from rlbisect.check.results import CheckResult, NotApplicable
from rlbisect.check.spec import RunSpec
from rlbisect.check.thresholds import Thresholds
from rlbisect.metrics import is_timing
from rlbisect.errors import CannotRun

# Three steps: what an evaluation at step 1 (every step, against at 0 and the last only) drew from
# the training stream shows at step 2. The off-default run needs two: its second step samples
# after an update, from a stream the first moved.
STEPS, VARIANT_STEPS = 3, 2
NEVER = 10 ** 6    # an eval_every that never comes (the last step may still evaluate)
RAN = "short runs complete"
RUN_CHECKS = (RAN, *loop.CHECKS, loop.LOGGED, "same seed, same rows", "evaluation leaves training alone")


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


class Main(NamedTuple):
    """Run A, as numbers (it may come back from a forked child). ``done``: already every check (n/a,
    rows only, or the run raised); else its record, declaration and rows."""
    done: Optional[dict[str, CheckResult]] = None
    record: Optional[Record] = None
    spec: Optional[RunSpec] = None
    rows: Optional[list[dict]] = None


Variant = Union[tuple[Record, Optional[RunSpec]], Exception, None]


def run_checks(adapter: Any, seed: int = 0, thresholds: Optional[Thresholds] = None) -> dict[str, CheckResult]:
    """The run-level checks on ``adapter``'s trainer -> {name: CheckResult}: runs A, A' and B
    (:func:`main_run`, :func:`quiet_run`, :func:`variant_run`), then :func:`finish`.
    `check_seeds` runs A and B in a forked child."""
    main = main_run(adapter, seed)
    if main.done is not None:
        return main.done
    return finish(adapter, main, quiet_run(adapter, seed), variant_run(adapter, seed), seed, thresholds)


def _watched(at: Any, caps: Any, run_seed: int, eval_every: int, steps: int = STEPS) -> tuple[Record, list[dict]]:
    offers = Offers.of(at)
    assert offers.train_run is not None    # main_run answers without runs when there is none
    rec = Recorder(at, offers.spec, caps.sampler_logp)
    with rec.watching():
        rows = offers.train_run(steps, run_seed, eval_every, tap=rec)
    return rec.record(), rows


def _declared(at: Any, steps: int) -> Optional[RunSpec]:
    spec = Offers.of(at).run_spec
    return spec(steps, None) if spec else None


def main_run(adapter: Any, seed: int = 0) -> Main:
    """Run A: ``STEPS`` steps at the configured setting, watched, evaluating every step."""
    offers = Offers.of(adapter)
    if offers.train_run is None:
        why = f"{type(adapter).__name__} has no train_run(steps, seed, eval_every)"
        return Main({name: CheckResult(name, float("nan"), True, na=why) for name in RUN_CHECKS})
    if not offers.tap_in_runs:
        return Main(_rows_only(offers.train_run, seed))
    try:
        record, rows = _watched(adapter, offers.capabilities, seed, 1)
    except CannotRun:
        raise                   # the adapter does not fit this code: exit 125 / skip, not a finding
    except Exception as e:      # noqa: BLE001 - the trainer's own loop raised: that is the finding
        return Main(_raised(e))
    return Main(None, record, _declared(adapter, STEPS), rows)


def quiet_run(adapter: Any, seed: int = 0) -> "list[dict] | Exception":
    """Run A' for the last two checks: A's seed and length, never evaluating (a schedule depends on
    the run's length), no tap to pay for -> its rows, or what its loop raised."""
    offers = Offers.of(adapter)
    if offers.train_run is None or not offers.tap_in_runs:
        return []               # main_run answers every check without it
    try:
        return offers.train_run(STEPS, seed, NEVER)
    except CannotRun:
        raise
    except Exception as e:      # noqa: BLE001 - the trainer's own loop raised: that is the finding
        return e


def variant_run(adapter: Any, seed: int = 0) -> Variant:
    """Run B: ``VARIANT_STEPS`` steps with the next seed at the adapter's ``run_variant``, watched,
    through the variant's own adapter (with_settings keeps its settings) -> its record and
    declaration, what its loop raised, or None where there is no run B."""
    offers = Offers.of(adapter)
    if offers.train_run is None or not offers.tap_in_runs or offers.with_settings is None or not offers.run_variant:
        return None
    try:
        at = offers.with_settings(**offers.run_variant)
        record = _watched(at, offers.capabilities, seed + 1, NEVER, VARIANT_STEPS)[0]
    except CannotRun:
        raise
    except Exception as e:      # noqa: BLE001 - the trainer's own loop raised: that is the finding
        return e
    return record, _declared(at, VARIANT_STEPS)


def finish(adapter: Any, main: Main, quiet: "list[dict] | Exception", variant: Variant, seed: int = 0,
           thresholds: Optional[Thresholds] = None) -> dict[str, CheckResult]:
    """All the run-level checks from runs A, A' and B."""
    if main.done is not None:
        return main.done
    if isinstance(variant, Exception):
        return _raised(variant)
    if isinstance(quiet, Exception):
        return _raised(quiet)
    assert main.record is not None and main.rows is not None
    runs = [(main.record, main.spec), *([variant] if variant is not None else [])]
    offers = Offers.of(adapter)
    later = "run B: " + ", ".join(f"{k}={v}" for k, v in (offers.run_variant or {}).items())
    out = loop.judge([r for r, _ in runs], [s for _, s in runs], thresholds or Thresholds(), offers, later)
    out[RAN] = CheckResult(RAN, 0.0, True)
    out[loop.LOGGED] = loop.logged(main.rows, main.record, thresholds or Thresholds())
    out.update(_repeatable(main.rows, quiet, lambda: _watched(adapter, offers.capabilities, seed, 1)[1]))
    if not main.record.evals:
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
