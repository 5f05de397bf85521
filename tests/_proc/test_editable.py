"""A project installed editable is imported from each probe's checkout, not the working tree: the
folders come from the interpreter's .pth files and setuptools' finders, read and never run."""

from __future__ import annotations

import os
from pathlib import Path

from rlbisect._proc.editable import outside_state, own_imports, redirected


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


def test_the_code_of_an_editable_install_outside_the_repository_is_its_state(tmp_path):
    """A TRL clone installed -e: editing or checking out its code changes the state; your own
    project's folders (read from each checkout) and files other than code do not."""
    import time
    repo, clone = tmp_path / "repo", tmp_path / "trl"
    (repo / "src").mkdir(parents=True)
    (clone / "trl").mkdir(parents=True)
    (clone / "trl" / "trainer.py").write_text("A = 1\n")
    prefix, site = _prefix(tmp_path)
    env = {"PATH": str(prefix / "bin")}
    assert outside_state(repo, ["python"], env) == ""                   # no editable install: no key
    (site / "__editable__.mine-1.pth").write_text(f"{repo / 'src'}\n")
    assert outside_state(repo, ["python"], env) == ""                   # yours is read from the checkouts
    (site / "__editable__.trl-1.pth").write_text(f"{clone}\n")
    before = outside_state(repo, ["python"], env)
    (clone / "README.md").write_text("not code\n")
    assert before and outside_state(repo, ["python"], env) == before
    time.sleep(0.01)
    (clone / "trl" / "trainer.py").write_text("A = 2\n")
    assert outside_state(repo, ["python"], env) != before
