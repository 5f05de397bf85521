"""git's environment variables never reach the user's repository: every variable git documents as
choosing which repository, work tree, index, object store, config or namespace it uses is removed
from rlbisect's own git and from every probe's predicate (rlbisect.git.repo.scrubbed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import git
from rlbisect.git.repo import KEPT, Repo, probe_env, scrubbed

#: git(1) ENVIRONMENT VARIABLES that choose the repository, work tree, index, objects, config,
#: namespace or refs, each set to point at the decoy (or to something that would change what git reads)
REDIRECTING = ["GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
               "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_CONFIG",
               "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_COUNT", "GIT_CONFIG_PARAMETERS",
               "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM", "GIT_REPLACE_REF_BASE",
               "GIT_NO_REPLACE_OBJECTS", "GIT_SHALLOW_FILE", "GIT_GRAFT_FILE", "GIT_INDEX_VERSION",
               "GIT_TEMPLATE_DIR", "GIT_EXEC_PATH", "GIT_QUARANTINE_PATH"]

#: A predicate that tries to change whatever repository git points it at, then judges the state.
HOSTILE = ("git tag -f mine HEAD; git config user.name x; git stash -q; git branch -f other; "
           "git commit -q --allow-empty -m x; test \"$(cat state)\" = good")


def decoy_env(decoy) -> dict[str, str]:
    d = str(decoy.path)
    env = {"GIT_DIR": f"{d}/.git", "GIT_WORK_TREE": d, "GIT_INDEX_FILE": f"{d}/.git/index",
           "GIT_OBJECT_DIRECTORY": f"{d}/.git/objects", "GIT_ALTERNATE_OBJECT_DIRECTORIES": f"{d}/.git/objects",
           "GIT_COMMON_DIR": f"{d}/.git", "GIT_NAMESPACE": "decoy", "GIT_CONFIG": f"{d}/.git/config",
           "GIT_CONFIG_GLOBAL": f"{d}/.git/config", "GIT_CONFIG_SYSTEM": f"{d}/.git/config",
           "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.hooksPath", "GIT_CONFIG_VALUE_0": f"{d}/hooks",
           "GIT_CONFIG_PARAMETERS": "'core.bare'='true'", "GIT_CEILING_DIRECTORIES": "/",
           "GIT_DISCOVERY_ACROSS_FILESYSTEM": "1", "GIT_REPLACE_REF_BASE": "refs/decoy/",
           "GIT_NO_REPLACE_OBJECTS": "1", "GIT_SHALLOW_FILE": f"{d}/.git/shallow",
           "GIT_GRAFT_FILE": f"{d}/.git/info/grafts", "GIT_INDEX_VERSION": "4",
           "GIT_TEMPLATE_DIR": d, "GIT_EXEC_PATH": d, "GIT_QUARANTINE_PATH": d}
    assert set(REDIRECTING) <= set(env)
    return env


def test_every_redirecting_variable_is_removed_and_identity_and_transport_are_kept():
    env = {**{k: "x" for k in REDIRECTING}, "GIT_CONFIG_KEY_0": "a", "GIT_CONFIG_VALUE_0": "b",
           "GIT_AUTHOR_NAME": "me", "GIT_SSH_COMMAND": "ssh -i k", "HOME": "/h"}
    assert scrubbed(env) == {"GIT_AUTHOR_NAME": "me", "GIT_SSH_COMMAND": "ssh -i k", "HOME": "/h"}
    assert not {k for k in KEPT if k in REDIRECTING}
    # a clone whose large files were never fetched checks out with pointers, as the user's own does
    assert scrubbed({"GIT_LFS_SKIP_SMUDGE": "1"}) == {"GIT_LFS_SKIP_SMUDGE": "1"}


def test_the_repository_is_located_once_through_git_dir_and_read_with_its_own(tiny_repo, monkeypatch):
    user, decoy = tiny_repo(["good", "bad"]), tiny_repo(["good", "good", "bad"], name="decoy")
    monkeypatch.chdir(decoy.path)
    monkeypatch.setenv("GIT_DIR", str(user.path / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(user.path))
    found = Repo.open()                                       # no --repo: GIT_DIR names it
    assert found.root == user.path and found.resolve("HEAD") == user.shas[-1]
    monkeypatch.setenv("GIT_INDEX_FILE", str(decoy.path / ".git" / "index"))
    assert Repo.open(decoy.path).resolve("HEAD") == decoy.shas[-1]   # --repo wins over GIT_DIR
    assert "GIT_DIR" not in probe_env() and "GIT_INDEX_FILE" not in probe_env()


@pytest.mark.slow
def test_a_bisect_under_a_hostile_git_environment_touches_neither_repository(tiny_repo, tmp_path):
    user = tiny_repo(["good", "good", "good", "bad", "bad", "bad"])
    decoy = tiny_repo(["good", "bad"], name="decoy")
    staged = user.path / "staged.txt"
    staged.write_text("mine\n")
    git(user.path, "add", "staged.txt")                        # the user's own staged change
    before, decoy_before = user.snapshot(), decoy.snapshot()
    env = {**os.environ, **decoy_env(decoy)}
    done = subprocess.run([sys.executable, "-m", "rlbisect", "run", f"{user.shas[0]}..{user.shas[-1]}",
                           "--repo", str(user.path), "--no-cache", "--", "sh", "-c", HOSTILE],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{user.shas[3]} is the first bad commit" in done.stdout
    assert user.snapshot() == before and decoy.snapshot() == decoy_before
    assert git(user.path, "diff", "--cached", "--name-only") == "staged.txt"   # still staged
