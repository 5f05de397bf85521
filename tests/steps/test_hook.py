"""The hook in a toy Adam loop: saves on a hit (only then), stays bounded, and its files replay exactly."""

from __future__ import annotations

import random

import pytest
import numpy as np
import torch

from rlbisect.steps.hook import SnapshotHook, snapshot_name
from rlbisect.steps.capture import state_digest
from rlbisect.steps.replay import compare_stats, restore
from rlbisect.steps.format import load_snapshot
from rlbisect.steps.spikes import CeilingRule, SpikeConfig


def make_model(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def collect(model: torch.nn.Module, step: int) -> dict[str, torch.Tensor]:
    """The 'rollout': inputs, targets, and the outputs the sampler saw (the toy's old log-probs)."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(32, 6, generator=g)
    with torch.no_grad():
        old = model(x)
    return {"x": x, "y": torch.randn(32, 3, generator=g), "old": old, "ids": torch.arange(32)}


def update(model, opt, batch, gen: torch.Generator, fault: bool = False) -> dict:
    """Two minibatches of Adam; uses the global RNG (dropout), a generator (order) and `random`."""
    with torch.no_grad():  # 0 in a correct trainer; `fault` is the toy's mask_shift
        logp_gap = (model(batch["x"]) - batch["old"]).abs().mean().item() + (5.0 if fault else 0.0)
    losses, norms = [], []
    for rows in torch.randperm(32, generator=gen).chunk(2):
        out = torch.nn.functional.dropout(model(batch["x"][rows]), p=0.2, training=True)
        loss = (out - batch["y"][rows]).pow(2).mean() * (1 + 0.01 * random.random())
        opt.zero_grad()
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        opt.step()
        losses.append(loss.detach())
    return {"loss": torch.stack(losses).mean(), "grad_norm": torch.stack(norms).mean().item(),
            "logp_gap": logp_gap, "update_time": 0.123 * random.random()}


def run(hook: SnapshotHook, steps: int, fault_steps=()) -> tuple[torch.nn.Module, list]:
    model, opt = make_model()
    gen = torch.Generator().manual_seed(5)
    all_hits = []
    for step in range(steps):
        batch = collect(model, step)
        hook.before_update(step, model, opt, batch, generators={"order": gen})
        stats = update(model, opt, batch, gen, fault=step in fault_steps)
        all_hits.append(hook.after_update(step, stats))
    return model, all_hits


def test_healthy_loop_saves_nothing(tmp_path):
    hook = SnapshotHook(tmp_path / "snaps")
    _, hits = run(hook, 10)
    assert hits == [[]] * 10 and hook.hits == []
    assert list((tmp_path / "snaps").iterdir()) == []


def test_forced_hit_saves_that_step_only(tmp_path):
    hook = SnapshotHook(tmp_path, config={"lr": 1e-2}, meta={"who": "toy"})
    _, hits = run(hook, 8, fault_steps={3})
    assert [i for i, h in enumerate(hits) if h] == [3]
    assert [p.name for p in tmp_path.iterdir()] == [snapshot_name(3)] == ["step-000003.pt"]
    snap = load_snapshot(tmp_path / "step-000003.pt")
    assert snap.step == 3 and [h.detector for h in snap.hits][:1] == ["ceiling:logp_gap"]
    assert snap.stats["logp_gap"] >= 5.0 and isinstance(snap.stats["loss"], float)
    assert snap.config == {"lr": 1e-2} and snap.meta == {"who": "toy"}
    assert set(snap.batch) == {"x", "y", "old", "ids"} and set(snap.rng.generators) == {"order"}
    assert snap.update_norm > 0


@pytest.mark.parametrize("fault", [True, False])
def test_replay_reproduces_recorded_stats_bit_for_bit(tmp_path, fault):
    hook = SnapshotHook(tmp_path, every=4)
    model, _ = run(hook, 6, fault_steps={4} if fault else ())
    snap = load_snapshot(tmp_path / "step-000004.pt")  # periodic or hit: the same content

    # A replay function: fresh objects from the config, state from the snapshot, same update code.
    replay_model, replay_opt = make_model(seed=123)
    replay_gen = torch.Generator()
    restore(snap, replay_model, replay_opt, {"order": replay_gen})
    stats = update(replay_model, replay_opt, snap.batch, replay_gen, fault=fault)
    rows = compare_stats(snap.stats, {k: float(v) for k, v in stats.items()})
    assert [r.name for r in rows] == ["loss", "grad_norm", "logp_gap"]  # timing excluded
    assert all(r.ok and r.abs_diff == 0.0 for r in rows), rows
    assert state_digest(replay_model) == snap.post_update_sha256

    # The same replay on "fixed" code moves exactly the statistic the fault touched.
    restore(snap, replay_model, replay_opt, {"order": replay_gen})
    other = update(replay_model, replay_opt, snap.batch, replay_gen, fault=not fault)
    bad = [r.name for r in compare_stats(snap.stats, {k: float(v) for k, v in other.items()}) if not r.ok]
    assert bad == ["logp_gap"]


def test_periodic_snapshots_rotate_keep_last(tmp_path):
    hook = SnapshotHook(tmp_path, every=2, keep_last=2)
    run(hook, 9)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000006.pt", "step-000008.pt"]
    assert [p.name for p in hook.kept()] == ["step-000006.pt", "step-000008.pt"]
    assert len(hook.saved) == 5  # 0, 2, 4, 6, 8 were written


@pytest.mark.parametrize("faults, kept", [
    ({5}, [5, 8, 9]),  # over budget: the oldest periodic one (7) goes, the hit stays
    ({1, 3, 5, 7}, [3, 5, 7]),  # hits alone fill the budget: the oldest hit goes, periodic ones too
])
def test_max_snapshots_prefers_deleting_periodic(tmp_path, faults, kept):
    cfg = SpikeConfig(mad=[], stuck=[], ceilings=[CeilingRule(signal="logp_gap", above=1e-3)])
    hook = SnapshotHook(tmp_path, every=1, keep_last=3, max_snapshots=3, detectors=cfg)
    run(hook, 10, fault_steps=faults)  # edge-triggered: each isolated fault step is a hit
    assert sorted(p.name for p in tmp_path.iterdir()) == [snapshot_name(s) for s in kept]
    assert [h.step for h in hook.hits] == sorted(faults)


def test_unrelated_files_are_never_deleted(tmp_path):
    (tmp_path / "step-000000.pt").write_bytes(b"someone else's")
    (tmp_path / "notes.txt").write_text("keep me")
    hook = SnapshotHook(tmp_path, every=1, keep_last=1)
    with pytest.warns(UserWarning, match="already holds step-000000.pt from another run: this one is step-000000-1.pt"):
        run(hook, 4)
    assert (tmp_path / "notes.txt").read_text() == "keep me"   # nor overwritten: another run's step 0 stays
    assert (tmp_path / "step-000000.pt").read_bytes() == b"someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "step-000000.pt", "step-000003.pt"]


def test_context_manager_form(tmp_path):
    hook = SnapshotHook(tmp_path)
    model, opt = make_model()
    gen = torch.Generator().manual_seed(5)
    batch = collect(model, 0)
    with hook.update(0, model, opt, batch, {"order": gen}) as rec:
        rec.log(update(model, opt, batch, gen, fault=True))
    assert [h.signal for h in rec.hits] == ["logp_gap"] and (tmp_path / "step-000000.pt").exists()
    with pytest.raises(ZeroDivisionError):
        with hook.update(1, model, opt, batch, {"order": gen}):
            1 / 0
    with pytest.raises(RuntimeError, match="without a matching before_update"):
        hook.after_update(1, {})  # the failed step's kept state was saved, then let go


def test_a_step_that_raises_is_saved_before_the_error_goes_on(tmp_path):
    """An exception inside the step (the update, or an evaluation after it) saves the pre-update
    state with the error as its hit, even with no periodic saving; Ctrl-C saves nothing."""
    hook = SnapshotHook(tmp_path)
    model, opt = make_model()
    gen = torch.Generator().manual_seed(5)
    batch = collect(model, 0)
    before = state_digest(model.state_dict())
    with pytest.raises(FloatingPointError, match="nan in eval"):
        with hook.update(0, model, opt, batch, {"order": gen}) as rec:
            update(model, opt, batch, gen)
            raise FloatingPointError("nan in eval")
    snap = load_snapshot(tmp_path / "step-000000.pt")
    assert [(h.detector, h.signal) for h in snap.hits] == [("raised", "FloatingPointError")]
    assert "nan in eval" in snap.hits[0].message and state_digest(snap.model) == before
    assert hook.hits == snap.hits and rec.stats is None
    hook.before_update(1, model, opt, collect(model, 1))
    assert hook.step_failed(KeyboardInterrupt()) is None and not (tmp_path / "step-000001.pt").exists()
    assert hook.step_failed(ValueError("no step begun")) is None


def test_misuse_is_loud(tmp_path):
    hook = SnapshotHook(tmp_path)
    model, opt = make_model()
    hook.before_update(0, model, opt, collect(model, 0))
    with pytest.raises(RuntimeError, match="kept: 0"):
        hook.after_update(1, {"loss": 0.0})
    with pytest.raises(ValueError):
        SnapshotHook(tmp_path, every=0)
    with pytest.raises(TypeError):
        SnapshotHook(tmp_path, config={"fn": print})  # not JSON-able: refused at start, not at a spike
    with pytest.raises(ValueError, match="step must be >= 0"):
        hook.before_update(-1, model, opt, collect(model, 0))


def test_a_batch_holding_more_than_tensors_is_saved_and_replayed_as_it_was(tmp_path):
    """An HF-style batch (a None mask, a count, nested containers) crashed the run at its first save."""
    model, opt = make_model()
    batch = {"x": torch.randn(4, 6), "attention_mask": None, "n_items": 7,
             "extra": {"pairs": [torch.ones(2), (1, "a")]}}
    hook = SnapshotHook(tmp_path, every=1)
    hook.before_update(0, model, opt, batch)
    hook.after_update(0, {"loss": 1.0})
    back = load_snapshot(hook.saved[-1]).batch
    assert back["attention_mask"] is None and back["n_items"] == 7 and back["extra"]["pairs"][1] == (1, "a")
    assert torch.equal(back["x"], batch["x"]) and torch.equal(back["extra"]["pairs"][0], torch.ones(2))
    # what cannot be stored is a warning and a missing file, never the end of the training run
    hook.before_update(1, model, opt, {"x": torch.ones(1), "sampler": object()})
    with pytest.warns(UserWarning, match="cannot store a object at batch/sampler"):
        hook.after_update(1, {"loss": 1.0})
    assert len(hook.kept()) == 1 and "step 1" in hook.errors[0]


def test_a_step_number_that_comes_again_never_overwrites_a_saved_step(tmp_path):
    """Steps counted per epoch: epoch 1's step 0 must not replace epoch 0's spike at step 0."""
    model, opt = make_model()
    hook = SnapshotHook(tmp_path, every=1, detectors=SpikeConfig(mad=[], stuck=[], ceilings=[
        CeilingRule(signal="loss", above=100.0)]))
    for loss in (1e3, 1.0):   # epoch 0, then epoch 1
        hook.before_update(0, model, opt, collect(model, 0))
        hook.after_update(0, {"loss": loss})
    spike, periodic = (load_snapshot(p) for p in hook.saved)
    assert [p.name for p in hook.saved] == ["step-000000.pt", "step-000000-1.pt"]
    assert spike.stats["loss"] == 1e3 and spike.hits and periodic.stats["loss"] == 1.0


def test_save_failure_warns_and_training_continues(tmp_path, monkeypatch):
    import rlbisect.steps.hook as hook_module

    def disk_full(*_):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(hook_module, "save_snapshot", disk_full)
    hook = SnapshotHook(tmp_path, every=1)
    with pytest.warns(UserWarning, match="not saved"):
        _, hits = run(hook, 2)
    assert len(hook.errors) == 2 and hook.kept() == [] and hits == [[], []]


def test_state_a_file_cannot_hold_is_a_warning_never_a_dead_run(tmp_path):
    """An optimizer or scheduler whose state holds an object: the step is not saved (optimizer) or
    saved without the scheduler (named in meta); the loop goes on either way."""
    model, opt = make_model()
    opt.state[next(model.parameters())]["handle"] = object()
    hook = SnapshotHook(tmp_path / "a", every=1)
    with pytest.warns(UserWarning, match="not saved"):
        hook.before_update(0, model, opt, collect(model, 0))
        hook.after_update(0, {"loss": 1.0})
    assert hook.errors and hook.kept() == []
    model, opt = make_model()
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    sched.handle = object()   # a scheduler's state_dict is its __dict__
    hook = SnapshotHook(tmp_path / "b", every=1)
    hook.before_update(0, model, opt, collect(model, 0), scheduler=sched)
    hook.after_update(0, {"loss": 1.0})
    snap = load_snapshot(hook.kept()[0])
    assert snap.scheduler is None and "cannot store a object" in snap.meta["scheduler_not_kept"]
    assert snap.post_optimizer_sha256 is not None
    # a schedule object of one's own, without state_dict; a value the step adds that no digest
    # reads: the step is still saved, without either
    model, opt = make_model()
    hook = SnapshotHook(tmp_path / "c", every=1)
    hook.before_update(0, model, opt, collect(model, 0), scheduler=object())
    opt.state[next(model.parameters())]["scale"] = np.float32(1.0)
    hook.after_update(0, {"loss": 1.0})
    snap = load_snapshot(hook.kept()[0])
    assert "AttributeError" in snap.meta["scheduler_not_kept"] and snap.post_optimizer_sha256 is None


def test_pydantic_config_is_stored_as_json(tmp_path):
    hook = SnapshotHook(tmp_path, every=1, config=SpikeConfig())
    run(hook, 1)
    assert load_snapshot(tmp_path / "step-000000.pt").config == SpikeConfig().model_dump(mode="json")


def test_code_identity_comes_from_the_model_class_repo(tmp_path, monkeypatch):
    import importlib.util
    import subprocess
    import sys

    repo = tmp_path / "trainer"
    repo.mkdir()
    (repo / "net.py").write_text("import torch\n\nclass Net(torch.nn.Linear):\n    pass\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    for cmd in (["init", "-q"], ["add", "net.py"], ["commit", "-qm", "net"]):
        subprocess.run([*git, *cmd], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    spec = importlib.util.spec_from_file_location("net_under_test", repo / "net.py")
    net = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "net_under_test", net)  # as an ordinary import would
    spec.loader.exec_module(net)
    monkeypatch.chdir(tmp_path)  # the cwd is not a repo: the identity must come from the class file

    hook = SnapshotHook(tmp_path / "snaps", every=1)
    model = net.Net(2, 2)
    opt = torch.optim.Adam(model.parameters())
    hook.before_update(0, model, opt, {"x": torch.ones(1)})
    hook.after_update(0, {"loss": 0.0})
    code = load_snapshot(tmp_path / "snaps" / "step-000000.pt").code
    assert (code.commit, code.dirty) == (sha, False)
    (repo / "net.py").write_text("# edited\n")
    assert SnapshotHook(tmp_path / "other", code_dir=repo).code.dirty is True


def test_frozen_modules_and_post_update_weights(tmp_path):
    model, opt = make_model()
    ref = make_model(seed=9)[0].requires_grad_(False)
    ref_state = {k: v.clone() for k, v in ref.state_dict().items()}
    hook = SnapshotHook(tmp_path, every=1, keep_post_update=True)
    gen = torch.Generator().manual_seed(5)
    batch = collect(model, 0)
    # The model passed as "frozen" (a reference that is the live policy) is not stored twice.
    hook.before_update(0, model, opt, batch, {"order": gen}, frozen={"ref": ref, "self": model, "none": None})
    hook.after_update(0, update(model, opt, batch, gen))
    snap = load_snapshot(tmp_path / "step-000000.pt")
    assert list(snap.frozen) == ["ref"]
    assert all(torch.equal(snap.frozen["ref"][k], v) for k, v in ref_state.items())
    assert state_digest(snap.post_update) == snap.post_update_sha256 == state_digest(model)
    plain = SnapshotHook(tmp_path / "plain", every=1)  # the default keeps neither
    run(plain, 1)
    assert load_snapshot(plain.kept()[0]).post_update is None


def run_with_ref(hook: SnapshotHook, steps: int, sync_at=()) -> list:
    """The toy loop with a frozen reference, reloaded from the policy after the steps in ``sync_at``."""
    model, opt = make_model()
    ref, _ = make_model()
    gen, hits = torch.Generator().manual_seed(5), []
    for step in range(steps):
        batch = collect(model, step)
        hook.before_update(step, model, opt, batch, generators={"order": gen}, frozen={"ref": ref})
        hits += hook.after_update(step, update(model, opt, batch, gen))
        if step in sync_at:
            ref.load_state_dict(model.state_dict())
    return hits


@pytest.mark.parametrize("sync_at,fires_at", [((), None), ((5,), None), (range(10), 2), ((2, 4, 6, 8), 5)])
def test_a_reference_that_follows_the_policy_fires_and_a_frozen_or_rarely_refreshed_one_does_not(
        tmp_path, sync_at, fires_at):
    """Moved = changed since the step before: a sync after step s shows at step s + 1."""
    hook = SnapshotHook(tmp_path)
    hits = [(h.detector, h.step) for h in run_with_ref(hook, 10, sync_at)]
    assert hits == ([] if fires_at is None else [("stuck:frozen_moved", fires_at)]), hits
    assert [p.name for p in hook.kept()] == ([] if fires_at is None else [snapshot_name(fires_at)])


def test_a_watch_only_hook_fires_the_same_and_writes_nothing(tmp_path):
    hook = SnapshotHook(None)
    assert [h.step for h in run_with_ref(hook, 10, range(10))] == [2] and hook.kept() == []
    with pytest.raises(ValueError, match="every needs a directory"):
        SnapshotHook(None, every=1)


def test_a_step_saved_with_a_frozen_reference_still_replays_exactly(tmp_path):
    """The hook's own frozen_moved goes to the detectors, not into the recorded statistics a
    replay recomputes (a key only one side has would never match)."""
    hook = SnapshotHook(tmp_path, every=1)
    run_with_ref(hook, 3)
    snap = load_snapshot(tmp_path / snapshot_name(2))
    assert "frozen_moved" not in snap.stats and snap.stats.keys() == {"loss", "grad_norm", "logp_gap", "update_time"}


def test_a_reference_reloaded_before_the_save_is_kept_as_the_update_read_it(tmp_path):
    # TinyAgent's ref_synced reloads the reference from the policy after the update and before
    # after_update: the saved reference was the reloaded one, and the flagged step never replayed
    hook = SnapshotHook(tmp_path, every=1)
    model, opt = make_model()
    ref, _ = make_model()
    gen, read = torch.Generator().manual_seed(5), []
    for step in range(3):
        batch = collect(model, step)
        read.append({k: v.clone() for k, v in ref.state_dict().items()})
        hook.before_update(step, model, opt, batch, generators={"order": gen}, frozen={"ref": ref})
        stats = update(model, opt, batch, gen)
        ref.load_state_dict(model.state_dict())
        hook.after_update(step, stats)
    first = load_snapshot(tmp_path / snapshot_name(0))   # not yet seen moving: saved after, and said
    assert first.meta["frozen_changed"] == ["ref"]
    for step in (1, 2):                                  # seen moving: cloned as read
        snap = load_snapshot(tmp_path / snapshot_name(step))
        assert "frozen_changed" not in snap.meta
        assert all(torch.equal(snap.frozen["ref"][k], v) for k, v in read[step].items())


@pytest.mark.parametrize("logged", [lambda x: x, lambda x: x.numpy(), lambda x: x.numpy()[None], lambda x: x.item()])
def test_a_nan_fires_however_it_is_logged(tmp_path, logged):
    """A NaN loss logged as a 0-dim numpy array (`loss.detach().numpy()`) passed every detector."""
    hook = SnapshotHook(tmp_path)
    model, opt = make_model()
    hook.before_update(0, model, opt, collect(model, 0))
    hits = hook.after_update(0, {"loss": logged(torch.tensor(float("nan")))})
    assert [h.detector for h in hits] == ["nonfinite"] and load_snapshot(tmp_path / snapshot_name(0)).stats["loss"] != 0
