from reference_trainer.config import EnvConfig
from reference_trainer.env import Env
from reference_trainer.tasks import make_tasks


def play(tok, task, calls, **cfg):
    env = Env(task, tok, EnvConfig(**cfg))
    env.reset()
    replies = [tok.decode(env.step(tok.encode(c))) for c in calls]
    return env, replies


def test_read_shows_the_admitted_fixes_and_copying_the_right_one_passes(tok):
    task = next(t for t in make_tasks("train") if len(t.hint) == 1)
    env, replies = play(tok, task, ["<call> read <end>", f"<call> edit {task.right} <end>", "<call> submit <end>"])
    assert replies == [f"<obs> fix {task.right}", "<obs> ok", ""]
    assert env.done and env.info.reward == 1.0 and env.info.hidden_pass and env.info.ops == ["read", "edit", "submit"]


def test_on_a_hard_task_read_admits_a_decoy_and_only_a_test_tells_them_apart(tok):
    task = next(t for t in make_tasks("train") if len(t.hint) == 2)
    decoy = next(k for k in task.hint if k != task.right)
    env, replies = play(tok, task, ["<call> read <end>", f"<call> edit {decoy} <end>", "<call> test <end>",
                                    f"<call> edit {task.right} <end>", "<call> test <end>", "<call> submit <end>"])
    assert replies[0] == "<obs> fix " + " ".join(map(str, sorted(task.hint)))
    assert replies[2] == "<obs> fail" and replies[4] == "<obs> pass" and env.info.reward == 1.0


def test_the_prompt_does_not_name_the_task(tok):
    tasks = make_tasks("all")
    assert len({tuple(Env(t, tok, EnvConfig()).reset()) for t in tasks}) == 1   # nothing to memorize a task by


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
