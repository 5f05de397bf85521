"""Nothing a predicate does reaches the user's repository, no hook of theirs ever runs, a
predicate that needs the repository's submodules gets them, and one that imports the project
installed editable imports each probe's checkout."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from helpers import git, install_hooks, submodule_repo


def test_a_predicate_that_writes_with_git_changes_nothing_of_the_users(tiny_repo, run_cli,
                                                                       tmp_path):
    r = tiny_repo(["good"] * 4 + ["bad"] * 5)
    r.git("tag", "v0", r.shas[0])
    marker = tmp_path / "hooks-ran"
    install_hooks(r.path / ".git", marker)
    before = r.snapshot()
    writes = ("git tag probe-$(cat n) && git branch b-$(cat n) && git config rlb.n $(cat n) && "
              "git notes add -m n && echo x >> state && git stash -q && "
              "git commit -q --allow-empty -m mine && git gc -q --auto; git checkout -q -- . ;")
    code, out, data = run_cli(["main~8..main", "--repo", str(r.path), "--", "sh", "-c",
                               writes + ' case "$(cat state)" in good) exit 0;; *) exit 1;; esac'])
    assert code == 0 and data["first_bad"] == r.shas[4], out
    assert r.snapshot() == before      # refs, config, packed-refs, stash, hooks, index, files
    assert not marker.exists()         # not one of the user's hooks ran


def test_a_predicate_that_needs_submodules_gets_the_recorded_ones(tmp_path, run_cli):
    top, shas, _ = submodule_repo(tmp_path)
    code, out, data = run_cli([f"{shas[0]}..{shas[-1]}", "--repo", str(top), "--", "sh", "-c",
                               'test "$(cat vendor/lib/state)" = good'])
    assert code == 0 and data["first_bad"] == shas[3], out


def test_a_src_layout_installed_editable_is_bisected_on_each_checkout_s_code(tmp_path, monkeypatch, run_cli):
    venv = tmp_path / "venv"   # a venv as `python -m venv` makes it, without starting one
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    (venv / "pyvenv.cfg").write_text(f"home = {Path(os.path.realpath(sys.executable)).parent}\n"
                                     "include-system-site-packages = false\n")
    (venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages").mkdir(parents=True)
    repo = tmp_path / "repo"
    (repo / "src" / "mypkg").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    for i, value in enumerate([1, 1, 1, 2, 2, 2]):
        (repo / "src" / "mypkg" / "__init__.py").write_text(f"VALUE = {value}\n")
        (repo / "n").write_text(f"{i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"c{i}")
    # what `pip install -e .` leaves for a src layout: the working tree's src on the path
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "__editable__.mypkg-0.1.pth").write_text(f"{repo / 'src'}\n")
    monkeypatch.setenv("PATH", f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    before = sorted(p.name for p in repo.iterdir())
    code, out, data = run_cli(["main~5..main", "--repo", str(repo), "--no-cache", "--",
                               "python", "-c", "import mypkg, sys; sys.exit(mypkg.VALUE - 1)"])
    assert code == 0, out
    assert data["first_bad"] == git(repo, "rev-parse", "main~2").strip()
    assert "installed editable" in out and "imports" in json.dumps(data["predicate"])
    assert sorted(p.name for p in repo.iterdir()) == before
