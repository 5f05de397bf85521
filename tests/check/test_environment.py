"""Checks 21-23, the environment's contract, played through TinyAgent's sampler and environment."""

import pytest

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


def test_a_malformed_call_that_takes_no_turn_fails(monkeypatch):
    """Every call takes a turn (the environment declares its budget): one that skipped counting
    malformed calls gave those episodes a seventh call, and passed both checks."""
    import reference_trainer.env as env_code
    step = env_code.Env.step

    def free_when_malformed(self, call):
        invalid, out = self.info.n_invalid, step(self, call)
        if self.info.n_invalid > invalid and not self.done:
            self.info.n_turns -= 1
        return out
    assert not sanity_checks(make_adapter())[MALFORMED].failed
    monkeypatch.setattr(env_code.Env, "step", free_when_malformed)
    res = sanity_checks(make_adapter())
    assert res[MALFORMED].failed and res[MALFORMED].value == 8       # 4 malformed calls x 2 tasks


def test_a_turn_limit_read_from_elsewhere_fails_the_budget(monkeypatch):
    """The environment ended episodes at 6 calls whatever max_turns said (a constant in its code):
    at max_turns 4 an unsubmitted episode made 6 calls where the budget is 4."""
    import reference_trainer.env as env_code
    step = env_code.Env.step

    def six_turns(self, call):
        out = step(self, call)
        if self.done and not self.info.submitted and self.info.n_turns < 6:
            self.done, out = False, self.tok.encode("<obs> ok")
        return out
    assert not any(sanity_checks(make_adapter(max_turns=4))[n].failed for n in (MALFORMED, REWARD))
    monkeypatch.setattr(env_code.Env, "step", six_turns)
    res = sanity_checks(make_adapter(max_turns=4))
    assert res[REWARD].failed and res[MALFORMED].failed
    res = sanity_checks(make_adapter())      # at the default (6 turns) the variant's 4 turns show it
    assert res[REWARD].failed and res[REWARD].setting == "KL k1, 4 turns"


@pytest.mark.parametrize("setting", [{"max_turns": 1}, {"max_call_tokens": 3}])
def test_a_setting_too_tight_for_the_scripted_solution_checks_that_the_limit_binds(setting):
    """max_turns=1 failed check 22 on healthy code: the solution and its submit need two calls.
    Where the limits cut the script, the check is that it earns nothing."""
    adapter = make_adapter(**setting)
    adapter.variants, adapter.probe_variants = {}, {}
    env = adapter.environment()
    assert env.unplayable(env.solution(0) + [env.submit])
    res = sanity_checks(adapter)
    assert not any(res[n].failed or res[n].na for n in (MALFORMED, REWARD))


def test_an_exploit_paid_under_the_hidden_reward_fails(monkeypatch):
    """The hidden verdict computed on the public tests alone: hard-coding the visible tests earned a
    reward under reward=hidden, and every check passed."""
    import reference_trainer.env as env_code
    step = env_code.Env.step

    def public_only(self, call):
        out = step(self, call)
        if self.info.submitted:
            self.info.hidden_pass = self.info.public_pass
            self.info.reward = float(self.info.hidden_pass)
        return out
    env = make_adapter().environment()
    assert env.play(0, env.exploit(0) + [env.submit]).reward == 0
    assert make_adapter(reward="public").environment().exploit(0) is None     # paid by configuration
    monkeypatch.setattr(env_code.Env, "step", public_only)
    res = sanity_checks(make_adapter())
    assert res[REWARD].failed and res[REWARD].value == 2         # the exploit, on each of 2 tasks


ANSWERS = "tool answers = the declared ones"


def test_the_declared_answers_are_what_the_tools_answer():
    env = make_adapter().environment()
    for task in range(2):
        for actions, answer in env.observations(task):
            assert env.play(task, actions).observations[len(actions) - 1] == answer


@pytest.mark.parametrize("old,new", [
    # the public tests' verdict taken on every test, hidden ones too: the exploit reads as a fail
    ('obs = "<obs> pass" if passes(self.code, task.public) else "<obs> fail"',
     'obs = "<obs> pass" if passes(self.code, task.public + task.hidden) else "<obs> fail"'),
    # read shows the spec's first candidate only: on a hard task the right fix may not be named
    ('obs = "<obs> fix " + " ".join(map(str, task.hint))', 'obs = "<obs> fix " + str(task.hint[0])'),
])
def test_a_tool_that_answers_wrong_fails_only_the_answers(monkeypatch, old, new):
    """Both faults passed every check (the run-level ones too) before check 23: the reward and the
    episode's record stay right, only what the policy is told is wrong."""
    import reference_trainer.env as env_code
    from tests.helpers import edit_source
    assert not sanity_checks(make_adapter())[ANSWERS].failed
    edit_source(monkeypatch, env_code.Env.step, old, new)
    res = sanity_checks(make_adapter())
    assert [n for n, r in res.items() if r.failed] == [ANSWERS]
    assert res[ANSWERS].value >= 1 and res[ANSWERS].detail.startswith("task ")
    assert ("<call> test <end> answered" if "hidden" in new else "<call> read <end> answered") in res[ANSWERS].detail


def test_a_call_limit_read_from_a_constant_fails_where_the_limit_cuts(monkeypatch):
    """The sampler closing calls at 4 tokens whatever max_call_tokens says passed every check: the
    default is 4. At the probes' 3-token limit the scripted solution is cut, and was paid."""
    import reference_trainer.sampler as sampler
    from tests.helpers import edit_source
    edit_source(monkeypatch, sampler.sample_episodes, "len(call[i]) >= env_cfg.max_call_tokens", "len(call[i]) >= 4")
    res = sanity_checks(make_adapter())
    assert res[REWARD].failed and res[REWARD].setting == "calls of 3 tokens" and res[REWARD].value == 2
    adapter = make_adapter()
    adapter.probe_variants = {}
    assert not sanity_checks(adapter)[REWARD].failed
