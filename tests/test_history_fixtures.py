import subprocess

import pytest

from history_fixtures import BENIGN, FAULTS, build_history, load_history


def git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_every_fault_applies_after_every_benign_edit(tmp_path, fault):
    h = build_history(tmp_path / "r", fault, commits=len(BENIGN) + 1, bad_at=len(BENIGN) + 1)
    assert h.fault_commit == h.bad and len(h.commits) == len(BENIGN) + 1
    diff = git(h.path, "show", "--format=", h.fault_commit)
    assert diff.count("\n+") >= 1 and "reference_trainer/" in diff      # a real code change


def test_histories_are_reproducible_commit_for_commit(tmp_path):
    a = build_history(tmp_path / "a", "mask_shift", commits=5, bad_at=2)
    b = build_history(tmp_path / "b", "mask_shift", commits=5, bad_at=2)
    assert a.commits == b.commits and a.good == b.good
    assert load_history(a.path) == a


def test_longer_histories_than_the_edit_catalogue(tmp_path):
    h = build_history(tmp_path / "r", "sign_flip", commits=len(BENIGN) + 5, bad_at=4)
    assert len(set(sha for sha, _ in h.commits)) == len(BENIGN) + 5
    assert h.commits[3][0] == h.fault_commit


def test_benign_edits_keep_the_starting_policy_cache_key(tmp_path):
    """Every commit of a history must reuse one cached starting policy, or probes rebuild it."""
    import importlib.util
    h = build_history(tmp_path / "r", "sign_flip", commits=len(BENIGN) + 1, bad_at=len(BENIGN) + 1)
    changed = set(git(h.path, "diff", "--name-only", h.good, h.bad).split())
    spec = importlib.util.spec_from_file_location("b", f"{h.path}/reference_trainer/base.py")
    hashed = {f"reference_trainer/{n}" for n in ("tasks.py", "tokenizer.py", "env.py", "policy.py", "base.py")}
    assert spec is not None and not (changed & hashed)


@pytest.mark.parametrize("args, message", [
    (dict(fault="nope"), "unknown fault"), (dict(commits=0), "at least 1"), (dict(commits=3, bad_at=4), "between 1 and 3")])
def test_bad_arguments(tmp_path, args, message):
    with pytest.raises(ValueError, match=message):
        build_history(tmp_path / "r", **args)


def test_refuses_a_non_empty_destination(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "x").write_text("mine")
    with pytest.raises(ValueError, match="not empty"):
        build_history(tmp_path / "r")
