"""Helpers the tests share: the one git for tests, random commit DAGs, live process-group members."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path


def random_dag(rng: random.Random, n: int) -> tuple[list[list[int]], bool, list[set[int]]]:
    """(parents, merges, reach): a random DAG of about `n` commits, linear or with merges, ending
    in one tip that merges every open branch; reach[i] is the set of i's ancestors (i included)."""
    merges = rng.random() < 0.6
    parents: list[list[int]] = [[]]
    heads = [0]
    for i in range(1, n):
        first = rng.choice(heads) if merges else i - 1
        ps = [first]
        others = [h for h in heads if h != first]
        if merges and others and rng.random() < 0.3:
            ps.append(rng.choice(others))
            heads.remove(ps[1])
        if merges and rng.random() < 0.3:
            heads.append(i)
        else:
            heads = [h for h in heads if h != first] + [i]
        parents.append(ps)
    if len(heads) > 1:
        parents.append(list(heads))
    reach: list[set[int]] = []
    for i in range(len(parents)):
        reach.append({i}.union(*(reach[p] for p in parents[i])))
    return parents, merges, reach


def monotone_states(rng: random.Random, reach: list[set[int]]) -> tuple[int, list[str]]:
    """(culprit, states): bad exactly where the culprit is an ancestor, plus (often) a run of
    untestable commits, frequently right at the culprit where git can only list candidates."""
    n = len(reach)
    culprit = rng.randint(1, n - 1)
    states = ["bad" if culprit in reach[i] else "good" for i in range(n)]
    if rng.random() < 0.6:
        a = min(culprit, n - 2) if rng.random() < 0.4 else rng.randint(1, n - 2)
        for i in range(a, min(n - 1, a + rng.randint(1, 5))):
            states[i] = "skip"
    return culprit, states


def live_members(pgid: int, settle: float = 0.0) -> list[int]:
    """Processes of group `pgid` that are not zombies (PID 1 here may not reap orphans); with
    `settle`, wait up to that long for them to go (a SIGKILL takes a moment)."""
    deadline = time.monotonic() + settle
    while True:
        found = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError, ValueError):   # the process exited while we looked
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(d.name))
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.02)


HOOKS = ("applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit",
         "prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase", "post-checkout",
         "post-merge", "pre-push", "pre-receive", "update", "proc-receive", "post-receive",
         "post-update", "reference-transaction", "push-to-checkout", "pre-auto-gc",
         "post-rewrite", "sendemail-validate", "fsmonitor-watchman", "post-index-change")


def install_hooks(git_dir: Path, marker: Path) -> None:
    """A hook in every slot of ``git_dir/hooks`` that appends its name to ``marker``."""
    hooks = git_dir / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in HOOKS:
        (hooks / name).write_text(f"#!/bin/sh\necho {name} >> {marker}\n")
        (hooks / name).chmod(0o755)


GIT_ENV = {"GIT_AUTHOR_NAME": "Tiny", "GIT_AUTHOR_EMAIL": "tiny@example.com",
           "GIT_COMMITTER_NAME": "Tiny", "GIT_COMMITTER_EMAIL": "tiny@example.com",
           "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path | str, *args: str, check: bool = True) -> str:
    """The tests' one git: a test identity, local file:// submodules allowed -> stdout, stripped of
    its last newline (an AssertionError with git's message when ``check`` and it fails)."""
    r = subprocess.run(["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, capture_output=True,
                       text=True, env={**os.environ, **GIT_ENV})
    if check and r.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {r.stderr}")
    return r.stdout.removesuffix("\n")


def submodule_repo(tmp_path: Path) -> tuple[Path, list[str], Path]:
    """A superproject whose commits move a submodule between its own commits 'good' and 'bad'."""
    lib = tmp_path / "lib"
    lib.mkdir()
    git(lib, "init", "-q", "-b", "main")
    lib_commits = []
    for state in ("good", "bad"):
        (lib / "state").write_text(f"{state}\n")
        git(lib, "add", "state")
        git(lib, "commit", "-qm", state)
        lib_commits.append(git(lib, "rev-parse", "HEAD"))
    top = tmp_path / "top"
    top.mkdir()
    git(top, "init", "-q", "-b", "main")
    git(top, "submodule", "add", "-q", str(lib), "vendor/lib")
    shas = []
    for i, sub in enumerate([0, 0, 0, 1, 1]):
        git(top / "vendor" / "lib", "checkout", "-q", lib_commits[sub])
        (top / "n").write_text(f"{i}\n")
        git(top, "add", "-A")
        git(top, "commit", "-qm", f"c{i}")
        shas.append(git(top, "rev-parse", "HEAD"))
    return top, shas, lib


def start_rlbisect(repo: Path, cmd: list[str], *extra: str) -> subprocess.Popen:
    """`rlbisect run main~7..main -- CMD` in its own process group (so a test can signal it)."""
    return subprocess.Popen([sys.executable, "-m", "rlbisect.cli.app", "run", "main~7..main",
                             "--repo", str(repo), *extra, "--", *cmd],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def wait_for(path: Path, proc: subprocess.Popen, seconds: float = 30) -> str:
    """The content of ``path`` once a probe has written it (the probe has started)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        if proc.poll() is not None:
            raise AssertionError(f"rlbisect exited early: {proc.communicate()}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the predicate never started")


def sweep(cases, fast: int = 3) -> list:
    """Cases for ``@pytest.mark.parametrize``: the first ``fast`` run in the fast pass, the rest of the
    sweep only in the full one (they carry the ``slow`` mark; see the slow rule in conftest.py)."""
    import pytest
    return [c if i < fast else pytest.param(c, marks=pytest.mark.slow) for i, c in enumerate(cases)]


def edit_source(monkeypatch, function, old: str, new: str) -> None:
    """``function`` with one line of its source changed (a fault written into the trainer's code,
    as a regression would be), for as long as ``monkeypatch`` holds: the function object itself
    gets the edited code, so every module that imported it runs the edit."""
    import inspect
    import textwrap
    function = inspect.unwrap(function)          # under its decorators (torch.no_grad)
    source = textwrap.dedent(inspect.getsource(function))
    assert source.count(old) == 1, old
    scope: dict = {}
    exec(compile(source.replace(old, new), inspect.getsourcefile(function), "exec"), function.__globals__, scope)
    monkeypatch.setattr(function, "__code__", inspect.unwrap(scope[function.__name__]).__code__)
