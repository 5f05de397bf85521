"""The environment's contract: checks 21-23, for adapters that expose their environment.

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
    observations(task) -> [(actions, answer), ...]   scripts and the answer the environment must
                 give their last action (data, written apart from the tools), read from
                 ``Played.observations``

   21 malformed calls are rejected   each malformed action, played alone, is counted as rejected
                                     (never acted on), and uses a turn (the episode then makes
                                     ``budget`` calls): the count of malformed actions that do not
   22 reward only for a submitted solution   solution + submit earns a reward; the solution never
                                     submitted (the turn budget runs out, after ``budget`` calls)
                                     and a wrong fix (or the ``exploit``) submitted earn 0; where the
                                     limits cut the solution, it earns 0 (the limit binds): the
                                     count of these that do not hold, per task
   23 tool answers = the declared ones   each script of ``observations`` gets its declared answer
                                     (scripts the limits cut are left out): the count that do not

Each runs at the configured setting, every declared variant and every ``probe_variants`` setting:
a limit the environment reads from a constant instead of its configuration holds at the default only.
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
    observations: tuple[str, ...] = ()   # the environment's answer to each action, in order


def _environment(ctx):
    env = ctx.offers.environment
    if env is None:
        return NotApplicable("the adapter exposes no environment() (see rlbisect.check.environment)")
    if "environment" not in ctx.cache:
        ctx.cache["environment"] = env()
    return ctx.cache["environment"]


def _at_every_setting(ctx, count):
    """``count(env)`` (the contract cases that do not hold, or NotApplicable) at every setting the
    probes visit (:attr:`~rlbisect.check.context.CheckContext.probe_settings`)."""
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
    result = worst(ctx, value, lambda v: v == 0, probes=True)
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
    unplayable = getattr(env, "unplayable", lambda actions: "")
    budget, broken = getattr(env, "budget", None), 0
    for task in range(TASKS):
        script = env.solution(task) + [env.submit]
        if unplayable(script):        # the configured limits cut it: it must not earn the reward
            broken += env.play(task, script).reward != 0
            continue
        broken += not env.play(task, script).reward > 0
        unsubmitted = env.play(task, env.solution(task))       # truncated: the budget ran out
        broken += (unsubmitted.reward != 0) + (budget is not None and unsubmitted.calls != budget)
        broken += env.play(task, env.wrong(task) + [env.submit]).reward != 0
        if (exploit := getattr(env, "exploit", lambda task: None)(task)) is not None:
            broken += env.play(task, exploit + [env.submit]).reward != 0
    return float(broken)


@INVARIANTS.register("tool answers = the declared ones")
def _answers(ctx):
    wrong: list[str] = []     # the first setting that fails is the first with any (worst stops there)
    result = _at_every_setting(ctx, lambda env: _answers_wrong(env, wrong))
    return result if isinstance(result, NotApplicable) or result[1] else (*result, wrong[0])


def _answers_wrong(env, wrong: list[str]):
    declared = getattr(env, "observations", None)
    if declared is None:
        return NotApplicable("the environment declares no observations(task) (see rlbisect.check.environment)")
    unplayable, played, count = getattr(env, "unplayable", lambda actions: ""), 0, 0
    for task in range(TASKS):
        for actions, answer in declared(task):
            if unplayable(actions):
                continue
            seen = env.play(task, actions).observations
            played += 1
            got = seen[len(actions) - 1] if len(seen) >= len(actions) else "no answer"
            if got != answer:
                count += 1
                wrong.append(f"task {task}: {' then '.join(actions)} answered {got!r}, declared {answer!r}")
    return float(count) if played else NotApplicable("the configured limits cut every declared script")
