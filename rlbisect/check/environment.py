"""The environment's contract: checks 21-22, for adapters that expose their environment.

An adapter offers ``environment()`` -> an object with

    malformed    actions the tool grammar rejects (data, written apart from the parser)
    idle         a well-formed action that neither changes the task nor ends the episode
    submit       the action that ends an episode for scoring
    solution(task) / wrong(task)   actions that leave task ``task`` solved / unsolved, unsubmitted
    play(task, actions) -> Played  the episode those actions make, through the trainer's own
                 sampling and environment code (after the script, ``idle`` until the episode ends)

   23 malformed calls are rejected   each malformed action, played alone, is counted as rejected
                                     (never acted on): the count of malformed actions acted on
   24 reward only for a submitted solution   solution + submit earns a reward; the solution never
                                     submitted (the turn budget runs out) and a wrong fix submitted
                                     earn 0: the count of these three that do not hold, per task
"""

from __future__ import annotations

from dataclasses import dataclass

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


@INVARIANTS.register("malformed calls are rejected")
def _malformed(ctx):
    env = _environment(ctx)
    if isinstance(env, NotApplicable):
        return env
    acted_on = sum(env.play(task, [action]).rejected < 1 for task in range(TASKS) for action in env.malformed)
    return float(acted_on), acted_on == 0


@INVARIANTS.register("reward only for a submitted solution")
def _reward_contract(ctx):
    env = _environment(ctx)
    if isinstance(env, NotApplicable):
        return env
    broken = 0
    for task in range(TASKS):
        broken += not env.play(task, env.solution(task) + [env.submit]).reward > 0
        broken += env.play(task, env.solution(task)).reward != 0      # truncated: the budget ran out
        broken += env.play(task, env.wrong(task) + [env.submit]).reward != 0
    return float(broken), broken == 0
