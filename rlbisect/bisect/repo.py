"""Git porcelain for the bisect: resolve GOOD..BAD, temporary worktrees, a real ``git bisect``.

The user's repository is only read. Everything this module changes lives in two temporary
*linked worktrees* under the system temp dir and their administrative dirs
``<git-common-dir>/worktrees/rlbisect-*``, all removed on close:

* the *bisect worktree* (created with ``--no-checkout``: no files) hosts ``git bisect start
  --no-checkout``. Bisect state is per worktree (``BISECT_*`` files and ``refs/bisect/*`` live
  in ``.git/worktrees/<id>/``), so the user's own bisect, HEAD, index and refs are untouched,
  and git itself picks every commit to test (read from ``BISECT_HEAD``) and names the result;
* the *probe worktree* holds the files of the commit under test; it is re-pointed with
  ``git checkout -f --detach`` + ``git clean -ffdx`` between probes.

Two side effects of git in the shared dir are undone: ``git bisect start`` writes an empty
``packed-refs`` when there was none (git deletes refs through the packed store), and
``git worktree add`` creates ``worktrees/``. Our git commands run with hooks disabled, no
auto-gc/maintenance and no fsmonitor, so nothing of the user's runs in or against our worktrees.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import git

# Isolate our git processes from the user's hooks and background maintenance.
GIT_OPTS = ("-c", "core.hooksPath=/dev/null", "-c", "gc.auto=0", "-c", "maintenance.auto=false",
            "-c", "core.fsmonitor=false", "-c", "advice.detachedHead=false")
_SHA = r"[0-9a-f]{40,64}"


class BisectInputError(ValueError):
    """The user's input cannot be bisected (exit 2); the message is one line, nothing changed."""


class RepoError(RuntimeError):
    """A git command failed where it should not have."""


def git_run(cwd: Path | str, *args: str) -> tuple[int, str, str]:
    """Run ``git <args>`` in ``cwd`` through GitPython; return (status, stdout, stderr)."""
    status, out, err = git.Git(str(cwd)).execute(
        ["git", *GIT_OPTS, *args], with_extended_output=True, with_exceptions=False)
    return status, out, err


def _git_ok(cwd: Path | str, *args: str) -> str:
    status, out, err = git_run(cwd, *args)
    if status != 0:
        msg = (err or out).strip().splitlines()
        raise RepoError(f"git {' '.join(args[:2])} failed: {msg[-1] if msg else status}")
    return out


def open_repo(path: Path | str) -> git.Repo:
    """Open the repository containing ``path`` or raise :class:`BisectInputError`."""
    try:
        return git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise BisectInputError(f"not a git repository: {path}") from None


def repo_root(repo: git.Repo) -> Path:
    """The directory git commands for the repository run in (work tree, or git dir if bare)."""
    return Path(repo.working_tree_dir or repo.git_dir)


def common_dir(repo: git.Repo) -> Path:
    """The git dir shared by all worktrees (``.git`` of the main worktree)."""
    root = repo_root(repo)
    return (root / _git_ok(root, "rev-parse", "--git-common-dir").strip()).resolve()


def resolve_range(repo: git.Repo, spec: str) -> tuple[str, str]:
    """Parse ``GOOD..BAD`` and return full (good, bad) commit ids, validated as git would need.

    Raises :class:`BisectInputError` for a malformed range, an unknown revision, an empty
    range (GOOD == BAD) and GOOD not an ancestor of BAD (swapped or unrelated endpoints).
    """
    parts = spec.split("..")
    if len(parts) != 2 or not all(p.strip() for p in parts) or "..." in spec:
        raise BisectInputError(f"expected GOOD..BAD (two revisions joined by '..'), got {spec!r}")
    root = repo_root(repo)
    shas = []
    for rev in (p.strip() for p in parts):
        status, out, _ = (1, "", "") if rev.startswith("-") else git_run(
            root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        if status != 0:
            raise BisectInputError(f"unknown revision {rev!r} (not a commit in {root})")
        shas.append(out.strip())
    good, bad = shas
    if good == bad:
        raise BisectInputError(f"empty range: GOOD and BAD are the same commit {good[:12]}")
    if git_run(root, "merge-base", "--is-ancestor", good, bad)[0] != 0:
        if git_run(root, "merge-base", "--is-ancestor", bad, good)[0] == 0:
            hint = "BAD is an ancestor of GOOD: did you swap them?"
        else:
            hint = "they are on diverged or unrelated histories"
        raise BisectInputError(f"GOOD {good[:12]} is not an ancestor of BAD {bad[:12]}: {hint}")
    return good, bad


@dataclass
class CommitInfo:
    """What the report says about a commit."""

    sha: str
    tree: str
    subject: str
    author: str
    date: str


def commit_info(repo: git.Repo, sha: str) -> CommitInfo:
    """Tree, subject, author and date of a commit."""
    c = repo.commit(sha)
    return CommitInfo(sha, c.tree.hexsha, c.summary if isinstance(c.summary, str) else "",
                      f"{c.author.name} <{c.author.email}>", c.authored_datetime.isoformat())


def history(repo: git.Repo, good: str, bad: str, first_parent: bool = False
            ) -> list[tuple[str, tuple[str, ...]]]:
    """GOOD then every commit of GOOD..BAD, oldest first (topological), with its parents."""
    args = ["rev-list", "--topo-order", "--reverse", "--parents"]
    out = _git_ok(repo_root(repo), *args, *(["--first-parent"] if first_parent else []),
                  bad, f"^{good}")
    rows = [(ln.split()[0], tuple(ln.split()[1:])) for ln in out.splitlines() if ln.strip()]
    return [(good, ())] + rows


@dataclass
class Step:
    """Where git's bisection stands after ``start`` or a mark."""

    status: Literal["next", "found", "ambiguous"]
    commit: str | None = None       # the commit git wants tested next (status "next")
    first_bad: str | None = None    # status "found"
    candidates: list[str] = field(default_factory=list)  # possible first bad commits
    remaining: int | None = None    # git: "N revisions left to test after this"


def parse_bisect_output(status: int, out: str, err: str) -> Step:
    """Read git's verdict from what ``git bisect start|good|bad|skip`` printed."""
    text = f"{out}\n{err}"
    found = re.search(rf"^({_SHA}) is the first bad commit", text, re.M)
    if found:
        return Step("found", first_bad=found[1], candidates=[found[1]])
    if "only 'skip'ped commits left to test" in text:
        body = text.split("could be any of:", 1)[-1].split("We cannot bisect more", 1)[0]
        return Step("ambiguous", candidates=re.findall(rf"^({_SHA})$", body, re.M))
    left = re.search(r"Bisecting: (\d+) revisions? left", text)
    if status == 0 and left:
        return Step("next", remaining=int(left[1]))
    lines = (err or out).strip().splitlines()
    raise RepoError(f"git bisect: {lines[-1] if lines else f'exit status {status}'}")


class _SharedDirGuard:
    """Records ``packed-refs`` and ``worktrees/`` of the common dir and puts them back."""

    def __init__(self, common: Path):
        self.common = common
        packed = common / "packed-refs"
        self.packed = packed.read_bytes() if packed.exists() else None
        self.had_worktrees = (common / "worktrees").exists()

    @staticmethod
    def _refs(data: bytes | None) -> list[bytes]:
        return [ln for ln in (data or b"").splitlines() if not ln.startswith(b"#")]

    def restore(self) -> None:
        wts = self.common / "worktrees"
        if not self.had_worktrees and wts.is_dir() and not any(wts.iterdir()):
            wts.rmdir()
        packed, lock = self.common / "packed-refs", self.common / "packed-refs.lock"
        try:  # git's own lock protocol, so a concurrent git process is never overwritten
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return
        try:
            now = packed.read_bytes() if packed.exists() else None
            if now != self.packed and self._refs(now) == self._refs(self.packed):
                if self.packed is None:
                    packed.unlink()
                else:
                    os.write(fd, self.packed)
                    os.close(fd)
                    fd = -1
                    os.replace(lock, packed)
        finally:
            if fd >= 0:
                os.close(fd)
            lock.unlink(missing_ok=True)


def sweep_stale(common: Path) -> None:
    """Remove worktrees of rlbisect runs that died without cleaning up (SIGKILL, power loss).

    Our worktree names carry the owning pid (``rlbisect-<pid>-...``); one whose process is
    gone is removed with its temp dir. Worktrees of others are never looked at.
    """
    for admin in sorted((common / "worktrees").glob("rlbisect-*")):
        m = re.match(r"rlbisect-(\d+)-", admin.name)
        if not m or int(m[1]) == os.getpid():
            continue
        try:
            os.kill(int(m[1]), 0)
            continue  # still running (or not ours to judge)
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        gitdir = admin / "gitdir"
        if gitdir.exists():
            tmp = Path(gitdir.read_text().strip()).parent.parent
            if tmp.name.startswith(f"rlbisect-{m[1]}-"):
                shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(admin, ignore_errors=True)
    wts = common / "worktrees"
    if wts.is_dir() and not any(wts.iterdir()):
        wts.rmdir()


class BisectSession:
    """One ``git bisect`` between ``good`` and ``bad``, run in temporary worktrees.

    Use as a context manager: ``close()`` always runs (bisect reset, worktrees removed, the
    shared git dir restored), also after an exception.
    """

    def __init__(self, repo: git.Repo, good: str, bad: str, first_parent: bool = False):
        self.repo, self.good, self.bad, self.first_parent = repo, good, bad, first_parent
        self.root = repo_root(repo)
        self.common = common_dir(repo)
        self.tmp: Path | None = None
        self.bisect_wt: Path | None = None
        self.probe_wt: Path | None = None
        self.bisect_log = ""
        self._worktrees: list[Path] = []
        self._guard: _SharedDirGuard | None = None

    def __enter__(self) -> "BisectSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> Step:
        """Create the bisect worktree and run ``git bisect start --no-checkout BAD GOOD``."""
        sweep_stale(self.common)
        self._guard = _SharedDirGuard(self.common)
        self.tmp = Path(tempfile.mkdtemp(prefix=f"rlbisect-{os.getpid()}-"))
        self.bisect_wt = self._add_worktree("bisect", self.bad, checkout=False)
        fp = ["--first-parent"] if self.first_parent else []
        return self._bisect("start", "--no-checkout", *fp, self.bad, self.good)

    def mark(self, commit: str, verdict: str) -> Step:
        """Tell git ``good|bad|skip`` for ``commit`` and return what it wants next."""
        return self._bisect(verdict, commit)

    def _bisect(self, *args: str) -> Step:
        step = parse_bisect_output(*git_run(self.bisect_wt, "bisect", *args))
        if step.status == "next":
            step.commit = _git_ok(self.bisect_wt, "rev-parse", "BISECT_HEAD").strip()
        return step

    def log(self) -> str:
        """``git bisect log``: replayable with ``git bisect replay``. (That command only prints
        the worktree's BISECT_LOG file; reading it directly saves a git process per run.)"""
        if self.bisect_wt is not None:
            status, out, _ = git_run(self.bisect_wt, "rev-parse", "--git-path", "BISECT_LOG")
            path = Path(out.strip()) if status == 0 else None
            if path is not None and not path.is_absolute():
                path = self.bisect_wt / path
            if path is not None and path.is_file():
                self.bisect_log = path.read_text()
        return self.bisect_log

    def materialize(self, commit: str) -> Path:
        """The probe worktree with exactly ``commit``'s files (tracked only, nothing else)."""
        try:
            if self.probe_wt is None:
                self.probe_wt = self._add_worktree("probe", commit, checkout=True)
            else:
                _git_ok(self.probe_wt, "checkout", "-f", "-q", "--detach", commit)
                _git_ok(self.probe_wt, "clean", "-ffdxq")
        except (RepoError, OSError):
            if self.probe_wt is not None:  # start afresh next time
                self._remove_worktree(self.probe_wt)
                self.probe_wt = None
            raise
        return self.probe_wt

    def extra_worktree(self, commit: str) -> Path:
        """Another checkout (e.g. of GOOD, for a predicate that compares against it), removed
        with the session like every other worktree."""
        return self._add_worktree(f"extra{len(self._worktrees)}", commit, checkout=True)

    def _add_worktree(self, role: str, commit: str, checkout: bool) -> Path:
        assert self.tmp is not None
        path = self.tmp / f"{self.tmp.name}-{role}"  # unique basename = unique admin dir name
        self._worktrees.append(path)
        _git_ok(self.root, "worktree", "add", "-q", "--detach",
                *([] if checkout else ["--no-checkout"]), str(path), commit)
        return path

    def _remove_worktree(self, path: Path) -> None:
        git_run(self.root, "worktree", "remove", "--force", "--force", str(path))
        shutil.rmtree(path, ignore_errors=True)
        admin = self.common / "worktrees" / path.name
        gitdir = admin / "gitdir"
        # Only ever delete an admin dir that points at our own temporary path.
        if gitdir.exists() and Path(gitdir.read_text().strip()).parent == path:
            shutil.rmtree(admin, ignore_errors=True)
        if path in self._worktrees:
            self._worktrees.remove(path)

    def close(self) -> None:
        """Capture the log, ``git bisect reset``, remove the worktrees, restore the git dir."""
        try:
            if self.bisect_wt is not None and self.bisect_wt.exists() and not self.bisect_log:
                self.log()
            # No `git bisect reset`: the bisect state (BISECT_*, refs/bisect/*) is per-worktree and
            # goes with the worktree's admin dir below; the tests check nothing else is left.
        finally:
            for path in list(reversed(self._worktrees)):
                self._remove_worktree(path)
            self.bisect_wt = self.probe_wt = None
            if self._guard is not None:
                self._guard.restore()
                self._guard = None
            if self.tmp is not None:
                shutil.rmtree(self.tmp, ignore_errors=True)
                self.tmp = None
