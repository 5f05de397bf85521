"""The run-level identities, judged from the runs' records (:class:`~rlbisect.check.observe.Record`).

Pure: recorded numbers and declarations (:class:`~rlbisect.check.spec.RunSpec`) in, one
:class:`CheckResult` per identity out. :mod:`rlbisect.check.run_level` runs the trainer.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence, Union

from rlbisect.check.observe import Record
from rlbisect.check.results import CheckResult, NotApplicable
from rlbisect.check.spec import RunSpec, lr_factor
from rlbisect.check.thresholds import Thresholds
from rlbisect.metrics import ALIASES

Found = Union[tuple[float, bool], NotApplicable]
CHECKS: dict[str, Callable[..., Found]] = {}


def _check(name: str):
    def register(fn):
        CHECKS[name] = fn
        return fn
    return register


def _worst(values: Sequence[float]) -> float:
    """The largest value; NaN wins (a NaN must fail, never vanish in a max)."""
    return max(values, key=lambda v: math.inf if v != v else v) if values else 0.0


def _over_losses(recs: Sequence[Record], field: str) -> list[float]:
    return [getattr(seen, field) for rec in recs for seen in rec.losses]


def judge(recs: Sequence[Record], specs: Sequence[Optional[RunSpec]], t: Thresholds, offers: Any,
          later: str = "") -> dict[str, CheckResult]:
    """Every identity over the recorded runs (``recs[i]`` declared by ``specs[i]``). A check that
    fails over them all and not over the first run alone names ``later`` (the other runs'
    setting) as where it failed: a fault off the defaults reads as one."""
    def result(name: str, got: Found) -> CheckResult:
        return (CheckResult(name, float("nan"), True, na=got.reason) if isinstance(got, NotApplicable)
                else CheckResult(name, float(got[0]), bool(got[1])))
    out = {}
    for name, fn in CHECKS.items():
        r = result(name, fn(recs, specs, t, offers))
        if r.failed and len(recs) > 1 and not result(name, fn(recs[:1], specs[:1], t, offers)).failed:
            r.setting = later
        out[name] = r.excused(offers.capabilities.by_design)
    return out


@_check("sampler = trainer log-prob, every step")
def _sampler(recs, specs, t, offers) -> Found:
    if not offers.capabilities.sampler_logp:
        return NotApplicable("the sampler records no log-probs")
    value = _worst([s.logp_gap for rec in recs for s in rec.steps])
    return value, value < t.logp_gap


@_check("rewards = the configured reward rule, every step")
def _rewards(recs, specs, t, offers) -> Found:
    errors = [s.reward_err for rec in recs for s in rec.steps]
    if not errors or all(e != e for e in errors):
        return NotApplicable("the adapter's Truth has no `rescored` rewards")
    value = _worst(errors)
    return value, value == 0


def _losses_seen(recs, field: str, why: str) -> Found:
    values = [v for v in _over_losses(recs, field) if v == v] if field == "ref_err" else _over_losses(recs, field)
    if not _over_losses(recs, field):
        return NotApplicable("the loop never showed its tap a loss")
    if not values:
        return NotApplicable(why)
    return _worst(values), True


@_check("old log-probs = the sampler's, every minibatch")
def _old(recs, specs, t, offers) -> Found:
    got = _losses_seen(recs, "old_err", "")
    return got if isinstance(got, NotApplicable) else (got[0], got[0] < t.logp_gap)


@_check("mask and advantages = the step's batch")
def _consumed(recs, specs, t, offers) -> Found:
    mask = _losses_seen(recs, "mask_wrong", "")
    if isinstance(mask, NotApplicable):
        return mask
    # a token-summed loss's divisor, where the trainer shows it: miscounted tokens join the mask's
    wrong = mask[0] + max([v for v in _over_losses(recs, "norm_wrong") if v == v], default=0.0)
    # the advantages need a declared estimator (a run at a setting stated as a kind has none)
    adv = _worst([seen.adv_err for rec in recs for seen in rec.losses if seen.declared])
    return _worst([wrong, adv]), wrong == 0 and adv < t.group_mean


@_check("reference log-probs = the starting policy's")
def _reference(recs, specs, t, offers) -> Found:
    got = _losses_seen(recs, "ref_err", "no loss consumed reference log-probs (no KL term)")
    return got if isinstance(got, NotApplicable) else (got[0], got[0] < t.logp_gap)


@_check("loss = the declared objective, every minibatch")
def _objective(recs, specs, t, offers) -> Found:
    if offers.spec is None:
        return NotApplicable("the adapter declares no rlbisect.check.spec.Objective")
    judged = [seen for rec in recs for seen in rec.losses if seen.judged]
    errors = [max(s.value_err, s.grad_err) if s.value_err == s.value_err and s.grad_err == s.grad_err else math.nan
              for s in judged]
    if not errors:
        return NotApplicable("the loop never showed its tap a loss value")
    value = _worst(errors)
    return value, value < t.objective


def _need(specs, field: str) -> Optional[NotApplicable]:
    if any(s is None for s in specs):
        return NotApplicable("the adapter declares no run_spec(steps, settings)")
    if any(getattr(s, field) is None for s in specs):
        return NotApplicable(f"the adapter's run_spec declares no {field}")
    return None


@_check("each step draws distinct training tasks")
def _tasks(recs, specs, t, offers) -> Found:
    if any(s.tasks is None for rec in recs for s in rec.steps):
        return NotApplicable("the adapter's Truth has no `tasks`")
    if (why := _need(specs, "train_tasks")) is not None:
        return why
    bad = 0
    for rec, spec in zip(recs, specs):
        for s in rec.steps:
            groups = [s.tasks[i:i + s.group_size] for i in range(0, len(s.tasks), s.group_size)]
            firsts = [g[0] for g in groups]
            bad += sum(len(set(g)) != 1 for g in groups) + len(firsts) - len(set(firsts))
            bad += spec.tasks_per_step is not None and len(firsts) != spec.tasks_per_step
            bad += sum(task not in spec.train_tasks or task in (spec.heldout_tasks or ()) for task in firsts)
    return float(bad), bad == 0


@_check("the task stream moves with steps and seeds")
def _stream(recs, specs, t, offers) -> Found:
    if any(s.tasks is None for rec in recs for s in rec.steps):
        return NotApplicable("the adapter's Truth has no `tasks`")
    same = 0
    for rec in recs:
        sets = [frozenset(s.tasks) for s in rec.steps]
        same += sum(a == b for a, b in zip(sets, sets[1:]))
    if len(recs) > 1 and recs[0].steps and recs[1].steps:    # runs A and B start from seeds s and s + 1
        same += recs[0].steps[0].tasks == recs[1].steps[0].tasks
    return float(same), same == 0


@_check("evaluation: held-out tasks, weights untouched")
def _evaluation(recs, specs, t, offers) -> Found:
    evals = [e for rec in recs for e in rec.evals]
    if not evals:
        return NotApplicable("the loop never showed its tap an evaluation")
    if (why := _need(specs, "heldout_tasks")) is not None:
        return why
    bad = 0
    for rec, spec in zip(recs, specs):
        bad += sum(task not in spec.heldout_tasks for e in rec.evals for task in e.tasks)
        bad += sum(e.weights_changed for e in rec.evals) + sum(o.in_eval for o in rec.opt_steps)
    return float(bad), bad == 0


def _steps_or_na(recs) -> Optional[NotApplicable]:
    if not any(rec.opt_steps for rec in recs):
        return NotApplicable("no torch.optim optimizer took a step")
    return None


def _close(a: Any, b: Any, rel: float = 1e-6) -> bool:
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_close(x, y, rel) for x, y in zip(a, b))
    try:
        return abs(float(a) - float(b)) <= rel * max(abs(float(b)), 1e-12)
    except (TypeError, ValueError):
        return a == b


@_check("optimizer = the configured one")
def _optimizer(recs, specs, t, offers) -> Found:
    if (why := _steps_or_na(recs) or _need(specs, "optimizer")) is not None:
        return why
    bad = 0
    for rec, spec in zip(recs, specs):
        policy = rec.steps[-1].params if rec.steps else None
        if spec.optimizer_steps is not None:    # an epoch or minibatch count the loop never read
            bad += abs(len(rec.opt_steps) - spec.optimizer_steps)
        for o in rec.opt_steps:
            bad += o.kind != spec.optimizer
            bad += sum(not _close(g.get(k), v) for g in o.groups for k, v in spec.hyper.items())
            bad += policy is not None and o.params != policy
    return float(bad), bad == 0


BINDS = 100.0   # a backward this many times over max_grad_norm must be clipped to it exactly


def _clip_error(applied: float, before: float, max_norm: float) -> float:
    """How far the applied norm is above max_norm; when the backward left a norm far above it (a
    gradient a trainer may still rescale, e.g. by its accumulation count, stays above), also below."""
    over = applied / max_norm - 1
    return abs(over) if before == before and before > BINDS * max_norm else over


@_check("gradients clipped to max_grad_norm before each step")
def _clipped(recs, specs, t, offers) -> Found:
    if (why := _steps_or_na(recs) or _need(specs, "max_grad_norm")) is not None:
        return why
    excess = _worst([_clip_error(o.grad_norm, o.pre_norm, spec.max_grad_norm)
                     for rec, spec in zip(recs, specs) for o in rec.opt_steps])
    return excess, excess < t.grad_clip


@_check("learning rate = the schedule at every step")
def _lr(recs, specs, t, offers) -> Found:
    if (why := _steps_or_na(recs) or _need(specs, "lr")) is not None:
        return why
    errors = []
    for rec, spec in zip(recs, specs):
        for o in rec.opt_steps:
            want = spec.lr * lr_factor(spec.schedule, o.n)
            errors += [abs(g["lr"] - want) / max(abs(want), spec.lr * 1e-3) for g in o.groups]
    value = _worst(errors)
    return value, value < t.lr


@_check("optimizer state persists across steps")
def _state(recs, specs, t, offers) -> Found:
    if (why := _steps_or_na(recs)) is not None:
        return why
    breaks = 0
    for rec in recs:
        steps = rec.opt_steps
        breaks += sum(a.optimizer != b.optimizer for a, b in zip(steps, steps[1:]))
        counted = [o.state_step for o in steps if o.state_step == o.state_step]
        breaks += sum(b != a + 1 for a, b in zip(counted, counted[1:]))
    return float(breaks), breaks == 0


LOGGED = "logged metrics = the step's batch"


def logged(rows: Sequence[dict], rec: Record, t: Thresholds) -> CheckResult:
    """Each metric a step's row logs that the tap recomputes from the step's batch (``reward``,
    ``zero_adv_frac``, ``logp_gap``; other trainers' names through :data:`~rlbisect.metrics.ALIASES`)
    equals it: a logging fault misleads every dashboard, detector and ``--metric`` bisect that reads
    the rows. The value is the largest difference; ``logp_gap`` may differ by float noise (``t.logp_gap``)."""
    names = set(rec.steps[0].logged) if rec.steps else set()
    rows = [{ALIASES.get(k, k): v for k, v in row.items()} for row in rows]
    rows = [row for row in rows if names & set(row)]
    if not rows:
        return CheckResult(LOGGED, math.nan, True, na="the run's rows log none of " + ", ".join(sorted(names) or ["reward"]))
    if len(rows) != len(rec.steps):
        return CheckResult(LOGGED, math.nan, True, na=f"the run logged {len(rows)} rows over {len(rec.steps)} "
                                                      "sampled steps: rows and steps cannot be paired")
    worst, wrong = 0.0, ""
    for row, seen in zip(rows, rec.steps):
        for name, want in seen.logged.items():
            got = row.get(name)
            if not isinstance(got, (int, float)):
                continue
            diff = abs(float(got) - want) if got == got else math.inf
            worst = max(worst, diff)
            if not wrong and diff > (t.logp_gap if name == "logp_gap" else 1e-6 * max(1.0, abs(want))):
                wrong = f"{name} at step {seen.step}: logged {got:.6g}, the batch's {want:.6g}"
    return CheckResult(LOGGED, worst, not wrong, detail=wrong)
