import random

from safetensors.torch import load_file

from reference_trainer import base as base_mod
from reference_trainer.config import BaseConfig, EnvConfig, PolicyConfig
from reference_trainer.tasks import make_tasks


def test_demonstrations_are_deterministic_and_cover_the_mixture(tok):
    cfg = BaseConfig(demos=200)
    a = base_mod.demonstrations(make_tasks("train"), tok, cfg, EnvConfig())
    b = base_mod.demonstrations(make_tasks("train"), tok, cfg, EnvConfig())
    assert [d.ids for d in a] == [d.ids for d in b]
    ops = [op for d in a for op in d.info.ops]
    assert {"read", "edit", "test", "hardcode_tests", "submit"} <= set(ops)
    assert any(d.info.n_invalid for d in a) and any(not d.info.submitted for d in a)


def test_read_copy_demo_passes_on_an_easy_task_and_copies_an_admitted_fix_on_a_hard_one(tok):
    easy = next(t for t in make_tasks("train") if len(t.hint) == 1)
    demo = base_mod.demonstration("read_copy", easy, tok, random.Random(0), EnvConfig())
    assert demo.info.reward == 1.0 and demo.info.ops == ["read", "edit", "submit"]
    hard = next(t for t in make_tasks("train") if len(t.hint) == 2)
    words = [tok.decode(base_mod.demonstration("read_copy", hard, tok, random.Random(s), EnvConfig()).ids).split()
             for s in range(20)]
    edits = {w[w.index("edit") + 1] for w in words}
    assert edits == {str(k) for k in hard.hint}   # either admitted fix, never another


def test_testing_demos_submit_a_pass_and_rerun_the_tests_on_a_fail_until_the_budget_runs_out(tok):
    # One edit, one test: a pass is submitted; a fix the tests reject never is, and with nothing else
    # to try the demonstrator re-runs the tests (a turn without progress) until the budget runs out.
    hard = next(t for t in make_tasks("train") if len(t.hint) == 2)
    seen = set()
    for kind in ("test", "read_test"):
        for s in range(20):
            demo = base_mod.demonstration(kind, hard, tok, random.Random(s), EnvConfig(max_turns=12))
            ops = demo.info.ops[1:] if kind == "read_test" else demo.info.ops
            assert ops[:2] == ["edit", "test"] and ops.count("edit") == 1
            if demo.info.reward == 1.0:
                assert ops == ["edit", "test", "submit"]
            else:
                assert not demo.info.submitted and demo.info.n_turns == 12 and set(ops[1:]) == {"test"}
            seen.add((kind, demo.info.reward))
    assert seen == {("test", 0.0), ("test", 1.0), ("read_test", 0.0), ("read_test", 1.0)}


def test_cache_key_follows_config_and_the_cache_is_safetensors(base, tok):
    k0 = base_mod.cache_key(BaseConfig(), PolicyConfig(), EnvConfig())
    assert k0 != base_mod.cache_key(BaseConfig(epochs=3), PolicyConfig(), EnvConfig())
    path = base_mod.cache_dir() / f"base-{k0}.safetensors"
    state = load_file(path)
    assert all((state[k] == v).all() for k, v in base.state_dict().items())


def test_starting_profile(base, tok, probe_trajs):
    from reference_trainer.train import rollout_row
    row = rollout_row(probe_trajs, 8)
    assert 0.10 <= row["reward"] <= 0.30
    assert 0.15 <= row["reads"] <= 0.5 and 0.02 <= row["malformed"] <= 0.2 and row["hardcode"] <= 0.2


def test_a_tester_that_retests_only_sometimes_can_end_a_lost_episode_short(tok):
    # retest < 1: after a failed test the demonstrator re-runs the tests with that chance per turn,
    # else submits the rejected fix, so lost episodes come in every length (BaseConfig.retest)
    hard = next(t for t in make_tasks("train") if len(t.hint) == 2)
    lost = [d for d in (base_mod.demonstration("test", hard, tok, random.Random(s), EnvConfig(), 0.8)
                        for s in range(60)) if d.info.reward == 0.0]
    assert lost and all(d.info.ops[:2] == ["edit", "test"] and d.info.ops.count("edit") == 1 for d in lost)
    assert any(d.info.submitted for d in lost) and any(not d.info.submitted for d in lost)
    assert len({d.info.n_turns for d in lost}) >= 3
