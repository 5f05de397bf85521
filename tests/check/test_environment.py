"""Checks 21-22, the environment's contract, played through TinyAgent's sampler and environment."""

from reference_trainer.adapter import make_adapter
from rlbisect.check.invariants import sanity_checks

MALFORMED, REWARD = "malformed calls are rejected", "reward only for a submitted solution"


def test_the_script_is_played_through_the_real_sampler():
    env = make_adapter().environment()
    solved = env.play(0, env.solution(0) + [env.submit])
    assert (solved.reward, solved.rejected, solved.calls) == (1.0, 0, 2)
    unsubmitted = env.play(0, env.solution(0))       # then idle tests until the turn budget runs out
    assert (unsubmitted.reward, unsubmitted.calls) == (0.0, 6)
    assert env.play(1, [env.malformed[0]]).rejected == 1


def test_healthy_passes_and_each_fault_fails_only_its_check():
    def failing(bug=None):
        res = sanity_checks(make_adapter(bug=bug))
        return [name for name in (MALFORMED, REWARD) if res[name].failed]
    assert failing() == []
    assert failing("malformed_executed") == [MALFORMED]
    assert failing("unsubmitted_rewarded") == [REWARD]


def test_na_without_an_environment():
    adapter = make_adapter()
    adapter.environment = None
    res = sanity_checks(adapter)
    assert all(res[n].passed is None and "exposes no environment()" in res[n].na for n in (MALFORMED, REWARD))
