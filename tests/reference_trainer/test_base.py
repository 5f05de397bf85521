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


def test_read_copy_demo_passes(tok):
    task = make_tasks("train")[0]
    demo = base_mod.demonstration("read_copy", task, tok, random.Random(0), EnvConfig())
    assert demo.info.reward == 1.0 and demo.info.ops == ["read", "edit", "submit"]


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
