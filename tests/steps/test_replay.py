"""`rlbisect replay`: every saved step of a real run replays bit for bit; a fault is caught and named;
hostile files are refused before anything runs; `--at REV` replays another commit's code in a
throwaway worktree and leaves the user's repository exactly as it was."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from helpers import git, install_hooks
from typer.testing import CliRunner

import reference_trainer
from rlbisect.cli.app import app
from rlbisect.steps.at import replay_at
from rlbisect.steps.format import RngState, Snapshot, load_snapshot, save_snapshot

STEPS = 6


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("run") / "snaps"
    res = cli("train", "--steps", str(STEPS), "--seed", "0", "--eval-every", "100",
              "--snapshot-dir", str(d), "--snapshot-every", "1")
    assert res.exit_code == 0, res.output
    return d


@pytest.fixture(scope="module")
def last(run_dir) -> Path:
    return run_dir / f"step-{STEPS - 1:06d}.pt"


def test_every_saved_step_replays_bit_for_bit(run_dir):
    files = sorted(run_dir.glob("step-*.pt"))
    assert [f.name for f in files] == [f"step-{i:06d}.pt" for i in range(STEPS)]
    for f in files:
        res = cli("replay", str(f), "--json")
        assert res.exit_code == 0, res.output
        out = json.loads(res.output)
        assert out["identical"] and out["params"]["digest_equal"] and out["params"]["update_diff_norm"] == 0
        names = {r["name"] for r in out["rows"]}
        assert {"loss", "approx_kl", "clip_frac", "grad_norm", "logp_gap", "entropy"} <= names
        assert all(r["ok"] and r["abs_diff"] == 0 for r in out["rows"])
        recorded = load_snapshot(f).stats
        assert all(r["recorded"] == recorded[r["name"]] for r in out["rows"])
        # What the update does not recompute is listed, never silently dropped.
        assert {"reward", "reads"} <= set(out["not_replayed"])
        assert set(recorded) == names | set(out["not_replayed"]) | {"step", "step_time"}
    text = cli("replay", str(files[-1])).output
    assert "IDENTICAL" in text and "bit for bit" in text and "not replayed" in text and "reward" in text


def test_a_loop_that_never_clears_gradients_replays_with_the_ones_it_held(tmp_path):
    """no_zero_grad adds the last step's gradients into this one: a snapshot keeps and restores
    them, and a file from before they were kept (grads None) no longer replays that step."""
    d = tmp_path / "snaps"
    res = cli("train", "--steps", "2", "--bug", "no_zero_grad", "--eval-every", "100",
              "--snapshot-dir", str(d), "--snapshot-every", "1")
    assert res.exit_code == 0, res.output
    step1 = d / "step-000001.pt"
    snap = load_snapshot(step1)
    assert snap.grads and all(g.abs().sum() > 0 for g in snap.grads.values())
    out = cli("replay", str(step1), "--json")
    assert out.exit_code == 0 and json.loads(out.output)["identical"], out.output
    assert "held grads" in cli("inspect", str(step1)).output
    snap.grads = None
    save_snapshot(tmp_path / "without.pt", snap)
    out = cli("replay", str(tmp_path / "without.pt"), "--json")
    assert out.exit_code == 1 and "grad_norm" in json.loads(out.output)["moved"], out.output


def test_sign_flip_differs_and_names_what_moved(last):
    res = cli("replay", str(last), "--bug", "sign_flip")
    assert res.exit_code == 1, res.output
    verdict = res.output.strip().splitlines()[-1]
    assert verdict.startswith("DIFFERS") and "approx_kl" in verdict and "parameters differ" in verdict
    out = json.loads(cli("replay", str(last), "--bug", "sign_flip", "--json").output)
    moved = [r for r in out["rows"] if not r["ok"]]
    assert moved and [r["name"] for r in moved] == out["moved"]
    rel = [r["rel_diff"] for r in moved]
    assert rel == sorted(rel, reverse=True)  # biggest first
    assert {"loss", "approx_kl", "grad_norm"} <= set(out["moved"]) and "loss_tokens" not in out["moved"]
    assert out["params"]["digest_equal"] is False and out["params"]["update_diff_norm"] > 0
    # Cross-machine tolerance: the same difference passes a loose enough bound, and says so.
    loose = cli("replay", str(last), "--bug", "sign_flip", "--tolerance", "1")
    assert loose.exit_code == 0 and "within tolerance 1" in loose.output


def test_a_tolerance_never_passes_parameters_it_cannot_measure(last, tmp_path):
    """Without the post-update weights only the two updates' sizes are known: a reversed update has
    the size of the recorded one, and must not pass as within a tolerance."""
    snap = load_snapshot(last)
    snap.post_update = None
    path = save_snapshot(tmp_path / "no-post.pt", snap)
    res = cli("replay", str(path), "--bug", "sign_flip", "--tolerance", "1e-3")
    assert res.exit_code == 1 and "how far cannot be measured" in res.output, res.output
    assert res.output.strip().splitlines()[-1].endswith("parameters differ")
    assert cli("replay", str(path), "--tolerance", "1e-3").exit_code == 0   # the same bits still match


def test_update_that_raises_is_a_difference(last, tmp_path):
    snap = load_snapshot(last)
    del snap.batch["rewards"]
    res = cli("replay", str(save_snapshot(tmp_path / "step-000005.pt", snap)))
    assert res.exit_code == 1 and "the update raised: KeyError" in res.output


def test_a_crafted_thread_count_is_capped_not_obeyed(last, tmp_path):
    """A snapshot's config asking for 100,000 threads must not reach torch (it would crash)."""
    snap = load_snapshot(last)
    snap.config["rl"]["threads"] = 1000
    res = cli("replay", str(save_snapshot(tmp_path / "step-000005.pt", snap)))
    # ran (bit-exactness may depend on the thread count: that is for the report to show)
    assert res.exit_code in (0, 1) and f"replayed with {os.cpu_count()}" in res.output, res.output
    snap.config["rl"]["threads"] = 100_000   # beyond what the config model accepts: refused
    res = cli("replay", str(save_snapshot(tmp_path / "step-000005.pt", snap)))
    assert res.exit_code == 2 and "threads" in res.output and res.output.count("\n") == 1


class _Evil:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _hostile(kind: str, good: Path, path: Path, marker: Path) -> None:
    data = good.read_bytes()
    if kind == "torch_pickle":
        torch.save({"model": _Evil(marker)}, path)
    elif kind == "raw_pickle":
        path.write_bytes(pickle.dumps({"model": _Evil(marker)}))
    elif kind == "random":
        path.write_bytes(os.urandom(4096))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:
        flipped = bytearray(data)
        flipped[len(data) - 1000] ^= 0x01  # deep in the tensor bytes: only the hash can tell
        path.write_bytes(bytes(flipped))


@pytest.mark.parametrize("kind", ["torch_pickle", "raw_pickle", "random", "empty", "truncated", "flipped"])
def test_hostile_files_are_refused_by_replay_and_inspect(kind, last, tmp_path):
    marker, path = tmp_path / "pwned", tmp_path / "step-000005.pt"
    _hostile(kind, last, path, marker)
    for command in ("replay", "inspect"):
        res = cli(command, str(path))
        assert res.exit_code == 2, (command, res.output)
        assert res.output.startswith(f"rlbisect {command}:") and res.output.strip().count("\n") == 0
        assert "Traceback" not in res.output
    assert not marker.exists()


def test_snapshot_of_an_unknown_trainer_cannot_replay(tmp_path):
    model = torch.nn.Linear(2, 2)
    snap = Snapshot(step=0, model=model.state_dict(), optimizer=None, batch={"x": torch.ones(2)},
                    rng=RngState(), config={"lr": 0.1})
    res = cli("replay", str(save_snapshot(tmp_path / "s.pt", snap)))
    assert res.exit_code == 2 and "no trainer" in res.output and res.output.count("\n") == 1


# --- --at REV ------------------------------------------------------------------------------------------

def fingerprint(repo: Path) -> dict[str, str]:
    """Every file and directory of the repository, .git included, with content hashes."""
    out = {}
    for root, _dirs, files in os.walk(repo):
        out[root] = "dir"
        out.update({str(Path(root) / f): hashlib.sha256((Path(root) / f).read_bytes()).hexdigest()
                    for f in files})
    return out


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, str, str]:
    """A repo holding a copy of reference_trainer; the second commit negates the advantages."""
    repo = tmp_path_factory.mktemp("history") / "repo"
    shutil.copytree(Path(reference_trainer.__file__).parent, repo / "reference_trainer",
                    ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "import the trainer")
    good = git(repo, "rev-parse", "HEAD")
    losses = repo / "reference_trainer" / "losses.py"
    src = losses.read_text()
    assert src.count("    return adv.flatten()") == 1
    losses.write_text(src.replace("    return adv.flatten()", "    return -adv.flatten()"))
    git(repo, "commit", "-qam", "tidy the advantage computation")
    (repo / "notes.txt").write_text("untracked, must survive\n")  # and a dirty tree, untouched
    (repo / "reference_trainer" / "env.py").write_text("# local edit, not committed\n")
    return repo, good, git(repo, "rev-parse", "HEAD")


@pytest.mark.slow
def test_replay_at_another_commit_leaves_the_repo_untouched(last, history, tmp_path):
    repo, good, bad = history
    install_hooks(repo / ".git", tmp_path / "hooks-ran")
    before = fingerprint(repo)
    ok = cli("replay", str(last), "--at", good, "--repo", str(repo))
    assert ok.exit_code == 0, ok.output
    assert f"trainer code at {good} = {good[:12]}" in ok.output and "IDENTICAL" in ok.output
    moved = cli("replay", str(last), "--at", "main", "--repo", str(repo))
    assert moved.exit_code == 1 and "DIFFERS" in moved.output and "approx_kl" in moved.output, moved.output
    for rev in ("no-such-rev", "--help"):
        res = cli("replay", str(last), "--at", rev, "--repo", str(repo))
        assert res.exit_code == 2 and "unknown revision" in res.output and res.output.count("\n") == 1
    assert cli("replay", str(last), "--at", good, "--repo", str(repo), "--timeout", "-1").exit_code == 2
    assert cli("replay", str(last), "--at", "HEAD", "--repo", str(repo.parent)).exit_code == 2  # not a repo
    assert fingerprint(repo) == before  # working tree, index, HEAD, refs, .git/worktrees: all as they were
    assert git(repo, "worktree", "list").count("\n") == 0
    assert not (tmp_path / "hooks-ran").exists()   # no hook of the repository ran


@pytest.mark.slow
def test_replay_at_is_a_bisect_predicate(last, history, tmp_path):
    repo, good, bad = history
    git(repo, "worktree", "add", "--detach", str(tmp_path / "probe"), bad)  # as the bisect runner would
    try:
        verdict, _, values, reason = replay_at(last, tmp_path / "probe", timeout=120)
    finally:
        git(repo, "worktree", "remove", "--force", str(tmp_path / "probe"))
    assert verdict == "bad" and values["moved"] >= 3 and values["digest_equal"] == 0, (verdict, reason)
    assert "no longer replays" in reason
    (tmp_path / "elsewhere").mkdir()  # no trainer there: untestable, never bad
    verdict, cause, values, reason = replay_at(last, tmp_path / "elsewhere", timeout=120)
    assert verdict == "skip" and cause == "cannot_run" and "reference_trainer is not in" in reason


def test_judge_counts_only_statistics_on_both_sides(last):
    from rlbisect.steps.replay import Replayed, ReplayError, judge
    snap = load_snapshot(last)
    update_keys = ["loss", "grad_norm"]
    same = Replayed({**{k: snap.stats[k] for k in update_keys}, "new_metric": 1.0}, snap.post_update_sha256)
    report = judge(snap, same)
    # A statistic added by later code is listed, not blamed; one it dropped looks like a rollout key.
    assert report.identical and report.not_recorded == ["new_metric"] and "approx_kl" in report.not_replayed
    snap.post_update_sha256 = None
    with pytest.raises(ReplayError, match="nothing to compare"):
        judge(snap, Replayed({"new_metric": 1.0}, "0" * 64))


@pytest.mark.parametrize("update", [{"lr_schedule": "linear", "warmup_steps": 3},
                                    {"optimizer": "adamw", "weight_decay": 0.1, "lr_schedule": "cosine"}])
def test_a_run_with_a_learning_rate_schedule_replays_bit_for_bit(update, tmp_path):
    """TinyAgent steps its schedule after every minibatch, inside the update: the replay rebuilds the
    configured optimizer and schedule at the recorded position (it replayed at one rate, and differed)."""
    from reference_trainer.config import make_config
    from reference_trainer.train import run
    from rlbisect.tinyagent.train import make_hook
    cfg = make_config(seed=0)
    cfg = cfg.model_copy(update={"update": cfg.update.model_copy(update=update)})
    hook = make_hook(tmp_path, 1, cfg, None, steps=3)
    run(cfg, steps=3, hook=hook, evaluate=False)
    for path in hook.kept():
        out = json.loads(cli("replay", str(path), "--json").output)
        assert out["identical"] and out["params"]["optimizer_equal"], (path.name, out["moved"], out["notes"])
    snap = load_snapshot(hook.kept()[-1])
    snap.scheduler = None   # a file without the schedule: replayed at one rate, and said so
    out = json.loads(cli("replay", str(save_snapshot(tmp_path / "no-schedule.pt", snap)), "--json").output)
    assert not out["identical"] and any("no learning-rate schedule" in n for n in out["notes"])
