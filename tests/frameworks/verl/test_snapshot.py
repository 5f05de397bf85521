"""Replayable verl steps: the hook on the worker's `train_mini_batch` saves what the update consumed,
a replay re-runs verl's update bit for bit, a fault in verl's code moves it, and the detectors decide
which steps are kept."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytestmark = pytest.mark.slow    # each runs verl's actor update a few times (seconds)

from rlbisect.steps.format import load_snapshot, save_snapshot  # noqa: E402
from rlbisect.steps.replay import ReplayError, judge  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def _run(directory, **kw):
    from rlbisect.frameworks.verl.snapshot import demo_run
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return demo_run(directory, **kw)


def _replay(path, bug=None):
    from rlbisect.frameworks.verl.snapshot import replay
    snap = load_snapshot(path)
    return judge(snap, replay(snap, bug))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    directory = tmp_path_factory.mktemp("verl-steps")
    hook = _run(directory, steps=3, every=1)
    return hook


def test_every_saved_step_replays_bit_for_bit(saved):
    assert [p.name for p in saved.kept()] == ["step-000000.pt", "step-000001.pt", "step-000002.pt"]
    for path in saved.kept():
        report = _replay(path)
        assert report.identical and report.exit_code == 0, path
        assert {r.name for r in report.rows} >= {"loss", "grad_norm", "kl_ref", "actor/pg_loss"}


def test_a_fault_in_verls_update_moves_the_replay(saved):
    report = _replay(saved.kept()[1], bug="accum_unscaled")
    assert not report.identical and report.exit_code == 1
    assert "loss" in report.moved


def test_a_step_recorded_with_a_fault_replays_with_it_and_differs_without(tmp_path):
    hook = _run(tmp_path, steps=1, every=1, bug="microbatch_token_mean")
    path = hook.kept()[0]
    assert load_snapshot(path).config["bug"] == "microbatch_token_mean"
    assert _replay(path).identical
    assert not _replay(path, bug="none").identical


def test_only_a_detector_hit_keeps_a_step(tmp_path):
    healthy = _run(tmp_path / "healthy", steps=3)
    assert healthy.hits == [] and healthy.kept() == []

    def spiked(worker):     # step 2's advantages blown up before the hook sees the batch
        from rlbisect.frameworks.verl.snapshot import watch
        hooks.append(watch(worker, tmp_path / "spiked"))
        inner, calls = worker.train_mini_batch, []

        def train_mini_batch(data):
            calls.append(1)
            if len(calls) == 3:
                data["advantages"] = data["advantages"] * 1e4
            return inner(data)
        worker.train_mini_batch = train_mini_batch
    from rlbisect.frameworks.verl.adapter import demo
    hooks: list = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        demo().train_run(3, 0, 0, on_worker=spiked)
    hook = hooks[0]
    assert [h.step for h in hook.hits] and {h.step for h in hook.hits} == {2}
    assert [p.name for p in hook.kept()] == ["step-000002.pt"]
    assert _replay(hook.kept()[0]).identical


def test_pack_keeps_jagged_held_and_plain_keys():
    from rlbisect.frameworks.verl.adapter import demo
    from rlbisect.frameworks.verl.snapshot import pack, unpack
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = demo()
        batch, _ = a.probe_batch()
    td = a.update_batch(batch["td"], 8)
    tensors, layout = pack(td)
    back = unpack(tensors, layout)
    assert sorted(back.keys()) == sorted(td.keys())
    assert back["input_ids"].is_nested and (back["input_ids"].values() == td["input_ids"].values()).all()
    assert (back["indices"] == td["indices"]).all() and back["dataloader_kwargs"] == {"shuffle": True}
    from verl.utils import tensordict_utils as tu
    tu.assign_non_tensor(td, odd=object())          # a per-row object the update does not read
    tensors, layout = pack(td)
    assert layout["dropped"] == ["odd"] and "odd" not in layout["non_tensor"]


def test_a_snapshot_naming_unknown_code_is_refused(saved, tmp_path):
    from rlbisect.frameworks.verl.snapshot import replay
    snap = load_snapshot(saved.kept()[0])
    snap.config = {**snap.config, "optimizer": "os.system"}
    with pytest.raises(ReplayError, match="does not fit"):
        replay(snap)
    snap = load_snapshot(saved.kept()[0])
    snap.config = {**snap.config, "model": {**snap.config["model"], "model_type": "no_such_model"}}
    with pytest.raises(ReplayError, match="cannot build the recorded model"):
        replay(snap)
    snap = load_snapshot(saved.kept()[0])
    snap.config = {**snap.config, "actor": {**snap.config["actor"], "__class__": 1}}
    save_snapshot(tmp_path / "odd.pt", snap)
    with pytest.raises(ReplayError, match="unknown actor setting"):
        replay(load_snapshot(tmp_path / "odd.pt"))


def test_the_cli_replays_a_verl_step_without_an_adapter(saved):
    done = subprocess.run([sys.executable, "-m", "rlbisect", "replay", str(saved.kept()[2])], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "IDENTICAL" in done.stdout


def test_a_sharded_module_is_refused_with_the_reason(tmp_path):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from rlbisect.frameworks.verl import _internals as v
    from rlbisect.frameworks.verl.adapter import demo
    from rlbisect.frameworks.verl.snapshot import watch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = demo()
    v.one_process_group()
    model = a.policy()
    fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
    worker = a.worker(model, v.optimizer(model, 1e-3, 0.0), True, 8)
    with pytest.raises(ValueError, match="sharded or the run has several processes"):
        watch(worker, tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_loss_a_replay_would_not_run_is_refused(tmp_path):
    from functools import partial

    from rlbisect.frameworks.verl import _internals as v
    from rlbisect.frameworks.verl.adapter import demo
    from rlbisect.frameworks.verl.snapshot import watch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = demo()
    model = a.policy()
    worker = a.worker(model, v.optimizer(model, 1e-3, 0.0), True, 8)
    config = worker.loss_fn.keywords["config"]
    worker.loss_fn = partial(lambda config, **kw: None, config=config)     # e.g. a distillation loss
    with pytest.raises(ValueError, match="not replayable"):
        watch(worker, tmp_path)
