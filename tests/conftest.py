"""Shared fixtures. ``tiny_repo`` builds real git repositories in ``tmp_path``.

Everything the suite writes goes under pytest's base temp dir: the starting-policy cache
(``RLBISECT_CACHE``; set ``RLBISECT_TEST_CACHE`` to a folder to keep it between sessions) and
every temporary directory (``TMPDIR``, inherited by the subprocesses the tests start).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import pytest

# the tests import their shared helpers by name (`from helpers import ...`): with pytest's
# importlib mode (test files in different folders may share a name) nothing else puts them there
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from helpers import GIT_ENV, git  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _contained(tmp_path_factory: pytest.TempPathFactory):
    """Point the caches and temp dirs of the whole session into pytest's base temp dir. The
    starting policy this machine already built (``rlbisect demo`` builds it) is copied in, read
    only: it is the same file under the same key, and building it again costs half a minute."""
    from reference_trainer.policy_cache import cached_path
    saved = {k: os.environ.get(k) for k in ("RLBISECT_CACHE", "TMPDIR")}
    built = cached_path()
    os.environ["RLBISECT_CACHE"] = os.environ.get("RLBISECT_TEST_CACHE") or \
        str(tmp_path_factory.mktemp("policy-cache"))
    if built.is_file() and not cached_path().exists():
        shutil.copyfile(built, cached_path())
    os.environ["TMPDIR"] = str(tmp_path_factory.mktemp("tmp"))
    tempfile.tempdir = None   # re-read TMPDIR
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    tempfile.tempdir = None


@dataclass
class TinyRepo:
    """A repository whose commit ``i`` has a file ``state`` (good/bad/skip/...) and ``n`` = i."""

    path: Path
    shas: list[str]          # commit ids in creation order; shas[0] is the root

    def git(self, *args: str, check: bool = True) -> str:
        return git(self.path, *args, check=check)

    def snapshot(self) -> dict[str, str]:
        """Every byte that makes up the repository's state, except ``.git/rlbisect/``.

        Covers HEAD, branch, index, refs, packed-refs, BISECT_*, worktrees/, objects and the
        working tree including untracked files; plus ``git worktree list`` (read-only).
        """
        out: dict[str, str] = {}
        for root, dirs, files in os.walk(self.path):
            rel = Path(root).relative_to(self.path)
            if rel == Path(".git"):
                dirs[:] = [d for d in dirs if d != "rlbisect"]
            out[f"{rel}/"] = "dir"
            for f in files:
                p = Path(root) / f
                out[str(rel / f)] = ("link:" + os.readlink(p) if p.is_symlink()
                                     else hashlib.sha256(p.read_bytes()).hexdigest())
        out["<worktree list>"] = self.git("worktree", "list", "--porcelain")
        return out


def build_repo(path: Path, states: Sequence[str],
               parents: Sequence[Sequence[int]] | None = None, dirty: bool = True) -> TinyRepo:
    """Build a repository in one ``git fast-import``: commit i holds ``state`` = states[i].

    ``parents[i]`` lists the parent indices of commit i (default: a line). The branch ``main``
    points at the last commit, which is checked out. ``dirty`` adds an untracked file, a
    modified tracked file and a staged file, so tests see them survive untouched.
    """
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    parents = parents or [[i - 1] if i else [] for i in range(len(states))]
    stream = []
    for i, (state, ps) in enumerate(zip(states, parents)):
        msg = f"c{i} {state}\n"
        when = 1_700_000_000 + 60 * i
        stream.append(f"commit refs/heads/main\nmark :{i + 1}\n"
                      f"committer Tiny <tiny@example.com> {when} +0000\n"
                      f"data {len(msg.encode())}\n{msg}")
        if ps:
            stream.append(f"from :{ps[0] + 1}\n" + "".join(f"merge :{p + 1}\n" for p in ps[1:]))
        stream.append("deleteall\n")
        for name, body in (("state", f"{state}\n"), ("n", f"{i}\n")):
            stream.append(f"M 100644 inline {name}\ndata {len(body.encode())}\n{body}")
        stream.append("\n")
    marks = path / ".git" / "marks"
    subprocess.run(["git", "fast-import", "--quiet", f"--export-marks={marks}"], cwd=path,
                   input="".join(stream), text=True, check=True, env={**os.environ, **GIT_ENV})
    by_mark = dict(ln.split() for ln in marks.read_text().splitlines())
    marks.unlink()
    shas = [by_mark[f":{i + 1}"] for i in range(len(states))]
    git(path, "reset", "-q", "--hard", "main")
    if dirty:
        (path / "untracked.txt").write_text("not in git\n")
        (path / "n").write_text("modified but not staged\n")
        (path / "staged.txt").write_text("staged\n")
        git(path, "add", "staged.txt")
    return TinyRepo(path, shas)


@pytest.fixture
def tiny_repo(tmp_path: Path) -> Callable[..., TinyRepo]:
    """Factory: ``tiny_repo(["good", "good", "bad"], parents=None, dirty=True, name="repo")``."""
    def make(states: Sequence[str], parents: Sequence[Sequence[int]] | None = None,
             dirty: bool = True, name: str = "repo") -> TinyRepo:
        return build_repo(tmp_path / name, states, parents, dirty)
    return make


# -- the slow rule ----------------------------------------------------------------------------
# A test is slow when it trains (TinyAgent's loop for more steps than the run-level checks' short
# runs take, or any torch optimizer stepping more than a few times) or starts a Python process that imports torch (rlbisect's CLI, a probe worker, a fork
# server, a trainer command). Such a test carries the `slow` mark (`pytestmark = pytest.mark.slow`
# for a module that is all slow); `python -m pytest -m "not slow"` is the fast pass. The rule is
# checked, not trusted: every test runs under a guard that notes heavy work, and an unmarked test
# that did some fails, saying what it did.

HEAVY_CODE = ("torch", "rlbisect", "reference_trainer")   # what a `python -c` may not import to be light


def _heavy_argv(argv) -> str | None:
    """What a command line does that makes a test slow, or None: rlbisect's CLI, or a Python that
    runs a module or a script, or code that imports torch or rlbisect (the watchdog, `-S`, and
    one-liners that import neither are light)."""
    args = [str(a) for a in (argv if isinstance(argv, (list, tuple)) else [argv])]
    name = Path(args[0]).name if args else ""
    python = name.startswith("python") or args[:1] == [sys.executable]
    if name == "rlbisect" or python and "-S" not in args[1:3] and (
            "-c" not in args[1:3] or any(word in " ".join(args) for word in HEAVY_CODE)):
        return "starts " + " ".join(args[:4])[:200]
    return None


@pytest.fixture(autouse=True)
def _slow_rule(request, monkeypatch):
    if request.node.get_closest_marker("slow"):
        yield
        return
    seen: list[str] = []
    popen_init = subprocess.Popen.__init__

    def watched_popen(self, args, *a, **kw):
        if (what := _heavy_argv(args)) is not None:
            seen.append(what)
        popen_init(self, args, *a, **kw)
    monkeypatch.setattr(subprocess.Popen, "__init__", watched_popen)
    import reference_trainer.train as loop
    train = loop.train

    def watched_train(*a, **kw):
        from rlbisect.check.run_level import STEPS
        if kw.get("steps", a[4] if len(a) > 4 else 99) > STEPS:   # the checks' own short runs are light
            seen.append("trains TinyAgent")
        return train(*a, **kw)
    monkeypatch.setattr(loop, "train", watched_train)
    yield
    if seen:
        pytest.fail(f"this test {seen[0]} but is not marked slow: add @pytest.mark.slow "
                    "(tests/conftest.py, the slow rule)", pytrace=False)
