"""The environment's contract: checks 21-22, for adapters that expose their environment.

An adapter offers ``environment()`` -> an object with

    malformed    actions the tool grammar rejects (data, written apart from the parser)
    idle         a well-formed action that neither changes the task nor ends the episode
    submit       the action that ends an episode for scoring
    solution(task) / wrong(task)   actions that leave task ``task`` solved / unsolved, unsubmitted
    play(task, actions) -> Played  the episode those actions make, through the trainer's own
                 sampling and environment code (after the script, ``idle`` until the episode ends)

and optionally

    budget       the calls an episode makes when it never submits, malformed ones included
                 (its turn limit); None or absent: not declared
    unplayable(actions) -> str   why the configured limits cut this script short (it needs more
                 calls than the budget, a call longer than a call may be), else ""
    exploit(task) -> actions or None   what passes the checks the policy can see and not the
                 grader's (hard-coding the visible tests), where the configured reward must not pay it

   21 malformed calls are rejected   each malformed action, played alone, is counted as rejected
                                     (never acted on), and uses a turn (the episode then makes
                                     ``budget`` calls): the count of malformed actions that do not
   22 reward only for a submitted solution   solution + submit earns a reward; the solution never
                                     submitted (the turn budget runs out, after ``budget`` calls)
                                     and a wrong fix (or the ``exploit``) submitted earn 0: the
                                     count of these that do not hold, per task; n/a where the
                                     limits cut the script
"""

from __future__ import annotations

from dataclasses import dataclass

from rlbisect.check.context import worst
from rlbisect.check.invariants import INVARIANTS
from rlbisect.check.results import NotApplicable

TASKS = 2   # tasks each case is played on


@dataclass(frozen=True)
class Played:
    reward: float     # what the episode was scored
    rejected: int     # actions the environment rejected as malformed
    calls: int        # actions the policy made (the script's and the idle ones)


def _environment(ctx):
    env = ctx.offers.environment
    if env is None:
        return NotApplicable("the adapter exposes no environment() (see rlbisect.check.environment)")
    if "environment" not in ctx.cache:
        ctx.cache["environment"] = env()
    return ctx.cache["environment"]


def _at_every_setting(ctx, count):
    """``count(env)`` (the contract cases that do not hold, or NotApplicable) at the configured
    setting and at each declared variant: a limit the environment reads from a constant instead
    of its configuration holds at the default only."""
    first = _environment(ctx)
    if isinstance(first, NotApplicable):
        return first
    reasons: list[str] = []

    def value(at):
        got = count(_environment(at))
        if isinstance(got, NotApplicable):
            reasons.append(got.reason)
            return None
        return got
    result = worst(ctx, value, lambda v: v == 0)
    return NotApplicable(reasons[0]) if isinstance(result, NotApplicable) and reasons else result


@INVARIANTS.register("malformed calls are rejected")
def _malformed(ctx):
    return _at_every_setting(ctx, _malformed_acted_on)


def _malformed_acted_on(env) -> float:
    budget = getattr(env, "budget", None)
    acted_on = 0
    for task in range(TASKS):
        for action in env.malformed:
            played = env.play(task, [action])
            acted_on += (played.rejected < 1) + (budget is not None and played.calls != budget)
    return float(acted_on)


@INVARIANTS.register("reward only for a submitted solution")
def _reward_contract(ctx):
    return _at_every_setting(ctx, _contract_broken)


def _contract_broken(env):
    unplayable = getattr(env, "unplayable", None)
    for task in range(TASKS):
        if unplayable is not None and (why := unplayable(env.solution(task) + [env.submit])):
            return NotApplicable(f"the scripted solution cannot be played at this setting: {why}")
    budget, broken = getattr(env, "budget", None), 0
    for task in range(TASKS):
        broken += not env.play(task, env.solution(task) + [env.submit]).reward > 0
        unsubmitted = env.play(task, env.solution(task))       # truncated: the budget ran out
        broken += (unsubmitted.reward != 0) + (budget is not None and unsubmitted.calls != budget)
        broken += env.play(task, env.wrong(task) + [env.submit]).reward != 0
        if (exploit := getattr(env, "exploit", lambda task: None)(task)) is not None:
            broken += env.play(task, exploit + [env.submit]).reward != 0
    return float(broken)
