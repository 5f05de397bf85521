"""Replay for any trainer: the code that replays comes from the command line (--adapter) or an
installed, registered replayer; never from an import path read out of the snapshot file."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rlbisect.steps import SnapshotHook, load_snapshot
from rlbisect.steps.at import replay
from rlbisect.steps.replay import Replayed, ReplayError, UpdateRaised, render_report

ROOT = Path(__file__).resolve().parents[2]


def _snapshot(tmp_path: Path, trainer: str, meta: dict | None = None) -> Path:
    model = torch.nn.Linear(3, 2)
    hook = SnapshotHook(tmp_path / "snaps", every=1, config={"trainer": trainer}, meta=meta or {})
    hook.before_update(0, model, None, {"x": torch.ones(2, 3)})
    hook.after_update(0, {"loss": 1.0})
    return hook.saved[-1]


def _evil_module(folder: Path) -> Path:
    marker = folder / "IMPORTED"
    (folder / "evilmod.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                       "def run(snap, bug):\n    raise SystemExit('evil replayer ran')\n")
    return marker


@pytest.mark.slow
def test_a_snapshot_naming_a_module_cannot_make_replay_import_it(tmp_path, monkeypatch):
    marker = _evil_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    path = _snapshot(tmp_path, "evilmod:run", meta={"replayer": "evilmod:run", "adapter": "evilmod:run"})
    with pytest.raises(ReplayError, match="replay others with --adapter"):
        replay(path)
    assert not marker.exists() and "evilmod" not in sys.modules
    # the command line too: exit 2, one line, nothing imported
    done = subprocess.run([sys.executable, "-m", "rlbisect", "replay", str(path)], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"},
                          timeout=120)
    assert done.returncode == 2 and "replay others with --adapter" in done.stderr
    assert not marker.exists()


def test_the_replayer_named_on_the_command_line_is_used(tmp_path):
    path = _snapshot(tmp_path, "anything")
    calls = []

    def mine(snap, bug):
        calls.append((snap.step, bug))
        return Replayed({"loss": 1.0}, snap.post_update_sha256)
    report = replay(path, replayer=mine, bug="x")
    assert calls == [(0, "x")] and report.identical
    with pytest.raises(ReplayError, match="--at with --adapter"):
        replay(path, replayer=mine, at="HEAD")


def test_a_replayer_outside_the_contract_is_no_verdict_and_tensor_stats_are_numbers(tmp_path):
    path = _snapshot(tmp_path, "anything")

    def unfit(snap, bug):
        torch.nn.Linear(4, 4).load_state_dict(snap.model)   # another model: RuntimeError, not a finding
    with pytest.raises(ReplayError, match="the replayer raised RuntimeError: Error"):
        replay(path, replayer=unfit)

    def tensors(snap, bug):   # stats as 0-dim tensors, as the hook accepts them when recording
        return Replayed({"loss": torch.tensor(1.0)}, snap.post_update_sha256)
    report = replay(path, replayer=tensors)
    assert report.identical and report.rows[0].replayed == 1.0
    # a replayer that returns what is not a Replayed: no verdict (exit 2), never "the update raised"
    for wrong in (None, {"loss": 1.0}):
        with pytest.raises(ReplayError, match=f"the replayer returned {type(wrong).__name__}, not a Replayed"):
            replay(path, replayer=lambda snap, bug, wrong=wrong: wrong)


def test_a_step_saved_because_it_raised_replays_as_the_same_error_or_differs(tmp_path):
    model = torch.nn.Linear(3, 2)
    hook = SnapshotHook(tmp_path / "snaps", config={"trainer": "anything"})
    with pytest.raises(FloatingPointError):
        with hook.update(0, model, None, {"x": torch.ones(2, 3)}):
            raise FloatingPointError("loss is nan")
    path = hook.saved[-1]

    def raises(kind, why="loss is nan"):
        def run(snap, bug):
            raise UpdateRaised(f"{kind.__name__}: {why}")
        return run
    same = replay(path, replayer=raises(FloatingPointError))
    assert same.identical and "IDENTICAL: the update raises, as the recorded step did" in render_report(same)
    other = replay(path, replayer=raises(KeyError))
    assert not other.identical and "DIFFERS: the update raised: KeyError" in render_report(other)
    # the type alone is not the error: another FloatingPointError is another bug
    also = replay(path, replayer=raises(FloatingPointError, "overflow in exp"))
    assert not also.identical and "the same type, another error" in render_report(also)
    fixed = replay(path, replayer=lambda snap, bug: Replayed({"loss": 1.0}, "f" * 64))   # it updates now
    assert not fixed.identical
    assert "DIFFERS: the recorded step raised FloatingPointError; the replay completed" in render_report(fixed)
    # weights left as the recorded step left them: the error came after the update (an evaluation)
    after = replay(path, replayer=lambda snap, bug: Replayed({"loss": 1.0}, snap.post_update_sha256))
    assert after.identical and "raised FloatingPointError after its update" in render_report(after)


def test_an_installed_registered_replayer_is_found_by_name(tmp_path, monkeypatch):
    (tmp_path / "goodmod.py").write_text(
        "from rlbisect.steps.replay import Replayed\n"
        "def run(snap, bug):\n    return Replayed({'loss': 2.0}, snap.post_update_sha256)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib.metadata as md

    from rlbisect.steps.replay import REPLAYERS
    monkeypatch.setattr(REPLAYERS, "_loaded", False)          # read the entry points again
    monkeypatch.setattr(REPLAYERS, "_entries", dict(REPLAYERS._entries))
    monkeypatch.setattr(md, "entry_points", lambda group=None: [
        EntryPoint("mytrainer", "goodmod:run", "rlbisect.replayers")] if group == "rlbisect.replayers" else [])
    report = replay(_snapshot(tmp_path, "mytrainer"))
    assert report.moved == ["loss"]          # it ran: recorded 1.0, replayed 2.0


@pytest.mark.slow
def test_the_documented_example_of_ones_own_loop_replays_and_promotes(tmp_path):
    """docs/steps.md, "Your own loop": the example's commands, as written, work."""
    example = ROOT / "docs" / "examples" / "replay_my_loop.py"
    assert "examples/replay_my_loop.py" in (ROOT / "docs" / "steps.md").read_text()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    trained = subprocess.run([sys.executable, str(example), str(tmp_path / "snaps")], env=env,
                             capture_output=True, text=True, timeout=300)
    printed = trained.stdout.split()   # the files kept: the newest three (keep_last)
    assert trained.returncode == 0 and len(printed) == 3 and all(Path(p).is_file() for p in printed), trained.stderr
    step = tmp_path / "snaps" / "step-000003.pt"
    replayed = subprocess.run([sys.executable, "-m", "rlbisect", "replay", str(step), "--adapter",
                               f"{example}:adapter"], env=env, capture_output=True, text=True, timeout=300)
    assert replayed.returncode == 0 and "IDENTICAL" in replayed.stdout, replayed.stdout + replayed.stderr
    promoted = subprocess.run([sys.executable, "-m", "rlbisect", "promote", str(step), "--to", str(tmp_path / "t"),
                               "--adapter", f"{example}:adapter"], env=env, capture_output=True, text=True,
                              timeout=300)
    assert promoted.returncode == 0, promoted.stderr
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "t")],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout + ran.stderr


def _adam_loop(tmp_path: Path, steps: int = 3):
    """Own loop: Adam with a step-wise schedule stepped inside the update (between minibatches)."""
    from rlbisect.steps.capture import diff_norm, optimizer_digest, state_digest
    from rlbisect.steps.replay import restore

    def build():
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        return model, opt, torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)

    def update(model, opt, sched, batch, damage=False):
        for half in (slice(0, 4), slice(4, 8)):
            opt.zero_grad()
            loss = ((model(batch["x"][half]) - batch["y"][half]) ** 2).mean()
            loss.backward()
            opt.step()
            sched.step()
        if damage:   # the weights are those of a correct step; the next step's are not
            for st in opt.state.values():
                st["exp_avg_sq"].mul_(0.5)
        return {"loss": loss.item()}

    model, opt, sched = build()
    data = torch.Generator().manual_seed(1)
    hook = SnapshotHook(tmp_path / "snaps", every=1, config={"trainer": "adam_loop"})
    for step in range(steps):
        batch = {"x": torch.randn(8, 4, generator=data), "y": torch.randn(8, 1, generator=data)}
        hook.before_update(step, model, opt, batch, scheduler=sched)
        hook.after_update(step, update(model, opt, sched, batch))

    def replayer(damage=False, schedule=True):
        def run(snap, bug):
            model, opt, sched = build()
            restore(snap, model, opt, scheduler=sched if schedule else None)
            stats = update(model, opt, sched if schedule else SimpleNamespace(step=lambda: None), snap.batch, damage)
            after = model.state_dict()
            return Replayed(stats, state_digest(after), diff_norm(after, snap.model),
                            post_optimizer_sha256=optimizer_digest(opt))
        return run
    return hook.saved[-1], replayer


def test_the_optimizers_state_after_the_step_is_compared(tmp_path, monkeypatch):
    """A fault that damages only Adam's moments leaves this step's weights right: the replay names the
    optimizer's state (the bisect predicate's reason too). Under a tolerance it is a note, not a verdict."""
    import rlbisect.steps.at as at
    path, replayer = _adam_loop(tmp_path)
    assert replay(path, replayer=replayer()).identical
    report = replay(path, replayer=replayer(damage=True))
    assert not report.identical and report.params["digest_equal"] and report.params["optimizer_equal"] is False
    text = render_report(report)
    assert "optimizer state after the step: DIFFERENT" in text and text.endswith("the optimizer's state after the step differs")
    monkeypatch.setattr(at, "replay_in_checkout", lambda *args: report)
    verdict, _, values, reason = at.replay_at(path, tmp_path)
    assert verdict == "bad" and values["optimizer_equal"] == 0.0 and reason.endswith("the optimizer's state moved")
    loose = replay(path, replayer=replayer(damage=True), tolerance=1e-6)
    assert loose.identical and any("optimizer's state after the step differs in bits" in n for n in loose.notes)


def test_a_schedule_stepped_inside_the_update_replays_from_its_recorded_position(tmp_path):
    """The learning rate halves after each minibatch: the scheduler's state is saved with the step,
    and a replay that restores it matches; one that keeps the recorded rate throughout does not."""
    path, replayer = _adam_loop(tmp_path)
    snap = load_snapshot(path)
    assert snap.scheduler is not None and snap.scheduler["last_epoch"] == 4   # two steps of two minibatches
    assert replay(path, replayer=replayer()).identical
    assert not replay(path, replayer=replayer(schedule=False)).identical
