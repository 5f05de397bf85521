"""Run-level checks: identities of short training runs, where one batch cannot show the fault.

Opt-in (`rlbisect check --runs`, `--predicate invariants --runs`): they train. An adapter offers
``train_run(steps, seed, eval_every) -> rows`` (one metric row per step); without it the checks
are n/a, said so.

    same seed, same rows                two runs with one seed log the same rows, bit for bit
                                        (keys with "time" excepted): the count of values that differ
    evaluation leaves training alone    evaluating every step vs never (but the last) changes no
                                        training value: evaluation and logging draw from their own
                                        generators. The count of values that differ
    optimizer state persists            a 3-step run steps the same torch optimizers as a 1-step
                                        run: a trainer that rebuilds its optimizer every step loses
                                        Adam's moments and step count. The count of optimizers the
                                        longer run adds; n/a when no torch.optim optimizer steps
"""

from __future__ import annotations

from rlbisect.check.adapter import Offers
from rlbisect.check.results import CheckResult
from rlbisect.metrics import is_timing

STEPS = 3          # enough for a drawn-from stream to shift the next step's batch
NEVER = 10 ** 6    # an eval_every that never comes (the last step may still evaluate)
RUN_CHECKS = ("same seed, same rows", "evaluation leaves training alone", "optimizer state persists")


def _stepped_optimizers(train, steps: int, seed: int, eval_every: int) -> tuple[list[dict], list]:
    """(rows, the torch optimizers that took a step during the run)."""
    from rlbisect.check.optim_probe import optimizers_stepped
    with optimizers_stepped() as seen:
        return train(steps, seed, eval_every), seen


def _differing(a: list[dict], b: list[dict], skip_eval: bool) -> int:
    """Values that differ between two runs, row by row, over the keys both log."""
    n = abs(len(a) - len(b))
    for ra, rb in zip(a, b):
        for key in set(ra) & set(rb):
            if is_timing(key) or (skip_eval and key.startswith("eval")):
                continue
            n += ra[key] != rb[key] and not (ra[key] != ra[key] and rb[key] != rb[key])   # NaN == NaN
    return n


def run_checks(adapter, seed: int = 0) -> dict[str, CheckResult]:
    """The run-level checks on ``adapter``'s trainer -> {name: CheckResult}."""
    train = Offers.of(adapter).train_run
    if train is None:
        why = f"{type(adapter).__name__} has no train_run(steps, seed, eval_every)"
        return {name: CheckResult(name, float("nan"), True, na=why) for name in RUN_CHECKS}
    every_step, many = _stepped_optimizers(train, STEPS, seed, 1)
    again = train(STEPS, seed, 1)
    quiet = train(STEPS, seed, NEVER)
    _, first = _stepped_optimizers(train, 1, seed, NEVER)
    same = _differing(every_step, again, skip_eval=False)
    left_alone = _differing(every_step, quiet, skip_eval=True)
    added = len(many) - len(first)
    persists = (CheckResult(RUN_CHECKS[2], float(added), added == 0) if first else
                CheckResult(RUN_CHECKS[2], float("nan"), True, na="no torch.optim optimizer took a step"))
    return {RUN_CHECKS[0]: CheckResult(RUN_CHECKS[0], float(same), same == 0),
            RUN_CHECKS[1]: CheckResult(RUN_CHECKS[1], float(left_alone), left_alone == 0),
            RUN_CHECKS[2]: persists}
