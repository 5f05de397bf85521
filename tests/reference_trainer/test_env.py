from reference_trainer.config import EnvConfig
from reference_trainer.env import Env
from reference_trainer.tasks import make_tasks


def play(tok, task, calls, **cfg):
    env = Env(task, tok, EnvConfig(**cfg))
    env.reset()
    replies = [tok.decode(env.step(tok.encode(c))) for c in calls]
    return env, replies


def test_read_reveals_the_right_fix_and_copying_it_passes(tok):
    task = make_tasks("train")[0]
    env, replies = play(tok, task, ["<call> read <end>", f"<call> edit {task.right} <end>", "<call> submit <end>"])
    assert replies == [f"<obs> fix {task.right}", "<obs> ok", ""]
    assert env.done and env.info.reward == 1.0 and env.info.hidden_pass and env.info.ops == ["read", "edit", "submit"]


def test_wrong_fix_fails_and_test_reports_it(tok):
    task = make_tasks("train")[0]
    wrong = (task.right + 1) % 5
    env, replies = play(tok, task, [f"<call> edit {wrong} <end>", "<call> test <end>", "<call> submit <end>"])
    assert replies[1] == "<obs> fail" and env.info.reward == 0.0


def test_hardcode_fools_only_the_public_reward(tok):
    task = make_tasks("train")[3]
    calls = ["<call> hardcode_tests <end>", "<call> test <end>", "<call> submit <end>"]
    env, replies = play(tok, task, calls)
    assert replies[1] == "<obs> pass" and env.info.reward == 0.0 and not env.info.hidden_pass
    env, _ = play(tok, task, calls, reward="public")
    assert env.info.reward == 1.0 and env.info.public_pass


def test_malformed_calls_are_counted_and_spend_a_turn(tok):
    task = make_tasks("train")[0]
    env, replies = play(tok, task, ["<call> edit <end>", "<call> submit read <end>", "<call> edit 3 3"])
    assert replies == ["<obs> malformed"] * 3
    assert env.info.n_invalid == 3 and env.info.n_turns == 3 and env.info.ops == []


def test_turn_budget_ends_the_episode_unsubmitted_with_zero_reward(tok):
    task = make_tasks("train")[0]
    env, replies = play(tok, task, [f"<call> edit {task.right} <end>", "<call> test <end>"], max_turns=2)
    assert env.done and replies[-1] == "" and not env.info.submitted and env.info.reward == 0.0
