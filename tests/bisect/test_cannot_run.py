"""A bisect with ``rlbisect check`` as its command: commits the adapter does not fit are skipped
(exit 125), never blamed; the answer comes from the checks alone."""

from __future__ import annotations

import sys

import pytest

from helpers import git

ADAPTERS = {
    "fits": "from reference_trainer.adapter import make_adapter\n\ndef make(**kw):\n    return make_adapter(**kw)\n",
    # the trainer API this adapter needs is not there yet at this commit
    "cannot": "import trainer_api_of_a_later_commit  # noqa\n\ndef make(**kw):\n    pass\n",
    "bad": "from reference_trainer.adapter import make_adapter\n\ndef make(**kw):\n"
           "    kw['bug'] = 'sign_flip'\n    return make_adapter(**kw)\n",
}


@pytest.mark.slow
def test_commits_the_adapter_does_not_fit_are_skipped_not_blamed(tmp_path, run_cli):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    states = ["fits", "fits", "fits", "cannot", "fits", "bad", "bad"]     # git's first pick is c3
    shas = []
    for i, state in enumerate(states):
        (repo / "adapter.py").write_text(ADAPTERS[state])
        (repo / "n").write_text(f"{i}\n")
        git(repo, "add", "adapter.py", "n")
        git(repo, "commit", "-qm", f"c{i} {state}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    cmd = [sys.executable, "-m", "rlbisect", "check", "--adapter", "adapter.py:make", "--no-runs", "--checks", "1,8"]
    code, out, data = run_cli(["main~6..main", "--repo", str(repo), "--confirm-endpoints", "--verify", "0", "--"] + cmd)
    assert code == 0 and data["first_bad"] == shas[5], out
    assert any(p["verdict"] == "skip" for p in data["probes"])
    for p in data["probes"]:
        state = states[shas.index(p["commit"])]
        assert p["verdict"] == {"fits": "good", "cannot": "skip", "bad": "bad"}[state], p
        if state == "cannot":
            assert p["values"]["exit_code"] == 125 and "cannot run the checks here" in p["output"]


@pytest.mark.slow
def test_a_relative_adapter_means_in_each_checkout_what_it_means_in_your_folder(tmp_path, run_cli, monkeypatch):
    """Run from sub/ with --adapter adapter.py:make: each probe reads sub/adapter.py of its commit
    (it read adapter.py at the top, missing there: every probe a skip). An uncommitted edit to it is
    refused: the probes would run the committed copy."""
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    shas = []
    for i, state in enumerate(["fits", "fits", "bad", "bad"]):
        (repo / "sub" / "adapter.py").write_text(ADAPTERS[state])
        (repo / "n").write_text(f"{i}\n")
        git(repo, "add", "sub/adapter.py", "n")
        git(repo, "commit", "-qm", f"c{i} {state}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    monkeypatch.chdir(repo / "sub")
    args = ["main~3..main", "--adapter", "adapter.py:make", "--no-runs", "--checks", "8", "--verify", "0"]
    code, out, data = run_cli(args)
    assert code == 0 and data["first_bad"] == shas[2], out
    assert all(p["verdict"] != "skip" for p in data["probes"])
    # a path from the top, as it worked before: read from the top of each checkout
    code, out, data = run_cli(["main~3..main", "--adapter", "sub/adapter.py:make", *args[3:], "--no-cache"])
    assert code == 0 and data["first_bad"] == shas[2], out
    (repo / "sub" / "adapter.py").write_text(ADAPTERS["fits"] + "# edited\n")
    code, out, _ = run_cli(args)
    assert code == 2 and "adapter.py (the adapter) has uncommitted changes" in out, out
