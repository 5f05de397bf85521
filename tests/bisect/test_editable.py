"""A project installed editable is imported from each probe's checkout, not the working tree: the
folders come from the interpreter's .pth files and setuptools' finders, read and never run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from helpers import git

from rlbisect.bisect.predicates.editable import own_imports, redirected


def _prefix(tmp_path: Path, *, exe: str = "python", prefix: Path | None = None) -> tuple[Path, Path]:
    """An interpreter's prefix (``bin/EXE``, an empty executable; ``tmp_path/venv`` unless given)
    and its site-packages."""
    prefix = prefix or tmp_path / "venv"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / exe).write_text("")
    (prefix / "bin" / exe).chmod(0o755)
    site = prefix / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    return prefix, site


def test_pth_paths_and_finder_mappings_inside_the_repository_are_found_and_nothing_runs(tmp_path):
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    prefix, site = _prefix(tmp_path)
    (site / "__editable__.a-1.pth").write_text(f"{repo / 'src'}\n")
    (site / "elsewhere.pth").write_text(f"# a comment\n{tmp_path / 'other'}\nimport os\n")
    (site / "__editable__.b-1.pth").write_text("import __editable___b_1_finder; __editable___b_1_finder.install()")
    # were the finder imported, it would raise: it is parsed
    (site / "__editable___b_1_finder.py").write_text(
        f"raise RuntimeError('imported')\nimport sys\nMAPPING: dict[str, str] = {{'b': {str(repo / 'b')!r}}}\n")
    env = {"PATH": str(prefix / "bin")}
    assert own_imports(repo, ["python", "-m", "pytest"], env) == (".", "src")
    assert own_imports(tmp_path / "other", ["python"], env) == (".",)
    assert own_imports(tmp_path / "unrelated", ["python"], env) == ()


def test_a_script_s_shebang_names_the_interpreter(tmp_path):
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    prefix, site = _prefix(tmp_path, exe="python3.11")   # neither python3 nor python on PATH
    (site / "x.pth").write_text(f"{repo / 'src'}\n")
    tool = tmp_path / "tools" / "train"
    tool.parent.mkdir()
    tool.write_text(f"#!{prefix / 'bin' / 'python3.11'}\nprint(1)\n")
    tool.chmod(0o755)
    assert own_imports(repo, ["train", "--seed", "{seed}"], {"PATH": str(tool.parent)}) == ("src",)
    assert own_imports(repo, ["sh", "-c", "train"], {"PATH": str(tool.parent)}) == ()


def test_the_repository_s_own_venv_counts_too(tmp_path):
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    _, site = _prefix(tmp_path, prefix=repo / ".venv")
    (site / "_mypkg.pth").write_text(f"{repo / 'src'}\n")
    assert own_imports(repo, ["uv", "run", "python", "train.py"], {"PATH": ""}) == ("src",)


def test_the_checkout_s_folders_go_first_on_pythonpath(tmp_path):
    env = {"PYTHONPATH": "/theirs", "X": "1"}
    got = redirected(env, tmp_path / "wt", (".", "src"))
    assert got["PYTHONPATH"] == os.pathsep.join([str(tmp_path / "wt"), str(tmp_path / "wt" / "src"), "/theirs"])
    assert got["X"] == "1" and redirected(env, tmp_path, ()) == env


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
