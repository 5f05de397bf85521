"""The only door to git: every git command rlbisect runs goes through :func:`git`.

Each command runs through GitPython's ``Git.execute`` with the user's hooks disabled
(``core.hooksPath`` pointed at an empty place), no pager, no credential prompt, no fsmonitor, no
automatic gc or maintenance, no optional locks (so a ``status`` never rewrites the user's index)
and the C locale (we parse git's messages). :class:`Repo` is a read-only view of the user's
repository; everything that writes lives in :mod:`rlbisect.git.sandbox`, in a private repository of
ours, never in the user's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import git as gitpython

from rlbisect.errors import GitError, InputError

GIT_OPTS = ("-c", "core.hooksPath=/dev/null", "-c", "gc.auto=0", "-c", "maintenance.auto=false",
            "-c", "core.fsmonitor=false", "-c", "advice.detachedHead=false",
            "-c", "protocol.file.allow=always", "--no-pager")
_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C", "LANGUAGE": "C",
        "GIT_ASKPASS": "true", "SSH_ASKPASS": "true"}


def git_status(cwd: Path | str, *args: str, env: dict[str, str] | None = None
               ) -> tuple[int, str, str]:
    """Run ``git <args>`` in ``cwd`` -> (status, stdout, stderr); never raises for git's status."""
    try:
        return gitpython.Git(str(cwd)).execute(
            ["git", *GIT_OPTS, *args], with_extended_output=True, with_exceptions=False,
            env={**_ENV, **(env or {})}, strip_newline_in_stdout=False)
    except gitpython.GitCommandNotFound:
        raise GitError("git is not installed (or not on PATH)") from None


def git(cwd: Path | str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run ``git <args>`` in ``cwd`` and return stdout; :class:`GitError` with git's last line."""
    status, out, err = git_status(cwd, *args, env=env)
    if status != 0:
        lines = (err or out).strip().splitlines()
        raise GitError(f"git {' '.join(args[:2])} failed: {lines[-1] if lines else status}")
    return out


@dataclass
class CommitInfo:
    """What a report says about a commit."""

    sha: str
    tree: str
    subject: str
    author: str
    date: str


_INFO = "%H%x00%P%x00%T%x00%s%x00%an <%ae>%x00%aI"


def _parse(out: str) -> list[tuple[CommitInfo, tuple[str, ...]]]:
    rows = []
    for line in out.splitlines():
        if line.strip():
            sha, parents, tree, subject, author, date = line.split("\x00")
            rows.append((CommitInfo(sha, tree, subject, author, date), tuple(parents.split())))
    return rows


class Repo:
    """The user's repository, read only. ``Repo.open`` finds it from any path inside it."""

    def __init__(self, root: Path, common_dir: Path):
        self.root, self.common_dir = root, common_dir

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> "Repo":
        path = Path(path).expanduser()
        if not path.is_dir():
            raise InputError(f"not a git repository: {path} (no such directory)")
        status, out, _ = git_status(path, "rev-parse", "--path-format=absolute",
                                    "--show-toplevel", "--git-common-dir")
        lines = out.split()
        if status != 0 or not lines:
            raise InputError(f"not a git repository: {path}")
        if len(lines) == 1:   # a bare repository has no top level
            return cls(Path(lines[0]), Path(lines[0]))
        return cls(Path(lines[0]), Path(lines[1]))

    def resolve(self, rev: str) -> str:
        """The full id of the commit ``rev`` names, or :class:`InputError`."""
        status, out, _ = (1, "", "") if rev.startswith("-") or not rev else git_status(
            self.root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
        if status != 0:
            raise InputError(f"unknown revision {rev!r} (not a commit in {self.root})")
        return out.strip()

    def is_ancestor(self, a: str, b: str) -> bool:
        return git_status(self.root, "merge-base", "--is-ancestor", a, b)[0] == 0

    def resolve_range(self, spec: str) -> tuple[str, str]:
        """``GOOD..BAD`` -> full (good, bad) ids, validated as a bisect needs them."""
        parts = spec.split("..")
        if len(parts) != 2 or not all(p.strip() for p in parts) or "..." in spec:
            raise InputError(f"expected GOOD..BAD (two revisions joined by '..'), got {spec!r}")
        good, bad = (self.resolve(p.strip()) for p in parts)
        if good == bad:
            raise InputError(f"empty range: GOOD and BAD are the same commit {good[:12]}")
        if not self.is_ancestor(good, bad):
            hint = ("BAD is an ancestor of GOOD: did you swap them?" if self.is_ancestor(bad, good)
                    else "they are on diverged or unrelated histories")
            raise InputError(f"GOOD {good[:12]} is not an ancestor of BAD {bad[:12]}: {hint}")
        return good, bad

    def history(self, good: str, bad: str, first_parent: bool = False
                ) -> tuple[list[tuple[str, tuple[str, ...]]], dict[str, CommitInfo]]:
        """GOOD then every commit of GOOD..BAD, oldest first (topological), with its parents;
        and what the report says about each of them. Two git processes, whatever the size."""
        fp = ["--first-parent"] if first_parent else []
        rows = _parse(git(self.root, "log", "--topo-order", "--reverse", f"--format={_INFO}",
                          *fp, bad, f"^{good}", "--"))
        rows = _parse(git(self.root, "log", "-1", f"--format={_INFO}", good, "--")) + rows
        order = [(info.sha, () if i == 0 else parents) for i, (info, parents) in enumerate(rows)]
        return order, {info.sha: info for info, _ in rows}

    def has_file(self, commit: str, path: str) -> bool:
        """Whether ``commit``'s tree holds ``path`` (relative to the top of the repository)."""
        return git_status(self.root, "cat-file", "-e", f"{commit}:{Path(path).as_posix()}")[0] == 0

    def info(self, sha: str) -> CommitInfo:
        return _parse(git(self.root, "log", "-1", f"--format={_INFO}", sha, "--"))[0][0]

    def show(self, sha: str) -> str:
        """The commit's message, stat and patch (what the demo prints for a culprit)."""
        return git(self.root, "show", "--stat", "--patch", "--format=%n%H %s%n", sha, "--")

    def read_ref_table(self) -> str:
        """Every ref but the user's bisect state, as ``packed-refs`` lines for a private copy."""
        out = git(self.root, "for-each-ref", "--format=%(objectname) %(refname)")
        return "".join(f"{ln}\n" for ln in out.splitlines()
                       if ln.strip() and not ln.split(" ", 1)[1].startswith("refs/bisect/"))


@dataclass
class CodeIdentity:
    """The git state of some code: commit sha, dirty flag, repo root (None when unknown)."""

    commit: str | None = None
    dirty: bool | None = None
    repo: str | None = None


def code_identity(path: str | os.PathLike | None = None) -> CodeIdentity:
    """Commit and dirty flag of the git repo containing ``path`` (default: cwd); unknowns on any
    failure. Untracked files are ignored: they rarely change the code that runs."""
    where = Path(path or ".")
    status, out, _ = git_status(where, "rev-parse", "--show-toplevel", "HEAD")
    if status != 0 or len(out.split()) != 2:
        return CodeIdentity()
    root, commit = out.split()
    status, out, _ = git_status(where, "status", "--porcelain", "--untracked-files=no")
    return CodeIdentity(commit, bool(out.strip()) if status == 0 else None, root)
