"""The only door to git: every git command rlbisect runs goes through :func:`git`.

Each command runs with the user's hooks disabled (``core.hooksPath`` pointed at an empty place), no
pager, no credential prompt, no fsmonitor, no automatic gc or maintenance, no optional locks (so a
``status`` never rewrites the user's index), the C locale (we parse git's messages), and an
environment of our own: none of the ``GIT_*`` variables that choose which repository, work tree,
index, object store, config or namespace git uses reaches it (:func:`scrubbed`). The predicate of
every probe gets the same (:func:`probe_env`), so a ``GIT_DIR`` exported by a hook or a
bare-repository setup never points a probe's git at the user's repository. :class:`Repo` is a
read-only view of the user's repository, located once (``GIT_DIR`` is honoured only to find it);
everything that writes lives in :mod:`rlbisect.git.sandbox`, in a private repository of ours.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from rlbisect.errors import GitError, InputError

GIT_OPTS = ("-c", "core.hooksPath=/dev/null", "-c", "gc.auto=0", "-c", "maintenance.auto=false",
            "-c", "core.fsmonitor=false", "-c", "advice.detachedHead=false",
            "-c", "protocol.file.allow=always", "--no-pager")
_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C", "LANGUAGE": "C",
        "GIT_ASKPASS": "true", "SSH_ASKPASS": "true"}
#: The ``GIT_*`` variables passed on: who commits, how git reaches a remote, whether git-lfs
#: fetches the large files (a checkout that would fail without them, as the user's own). Every other one
#: (GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE, GIT_OBJECT_DIRECTORY, GIT_ALTERNATE_OBJECT_DIRECTORIES,
#: GIT_COMMON_DIR, GIT_NAMESPACE, GIT_CONFIG*, GIT_CEILING_DIRECTORIES, GIT_REPLACE_REF_BASE,
#: GIT_SHALLOW_FILE, GIT_EXEC_PATH, ...) can point git at another repository, index, object store,
#: config or namespace, or make it run other programs: it is removed.
KEPT = frozenset({"GIT_LFS_SKIP_SMUDGE", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE", "GIT_COMMITTER_NAME",
                  "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE", "GIT_SSH", "GIT_SSH_COMMAND",
                  "GIT_SSH_VARIANT", "GIT_SSL_NO_VERIFY", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH",
                  "GIT_HTTP_LOW_SPEED_LIMIT", "GIT_HTTP_LOW_SPEED_TIME", "GIT_HTTP_USER_AGENT"})


def scrubbed(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the ``GIT_*`` variables that could redirect git (all but :data:`KEPT`)."""
    return {k: v for k, v in env.items() if not k.startswith("GIT_") or k in KEPT}


def probe_env() -> dict[str, str]:
    """The environment a probe's predicate runs in: this process's, scrubbed."""
    return scrubbed(os.environ)


def git_status(cwd: Path | str, *args: str, env: dict[str, str] | None = None
               ) -> tuple[int, str, str]:
    """Run ``git <args>`` in ``cwd`` -> (status, stdout, stderr); never raises for git's status.
    ``env``: extra variables (the rest is this process's environment, scrubbed)."""
    try:
        r = subprocess.run(["git", *GIT_OPTS, *args], cwd=cwd, capture_output=True, text=True,
                           errors="replace", stdin=subprocess.DEVNULL,
                           env={**scrubbed(os.environ), **_ENV, **(env or {})})
    except FileNotFoundError:
        raise GitError("git is not installed (or not on PATH)") from None
    return r.returncode, r.stdout, r.stderr


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
    """The user's repository, read only. :meth:`open` finds it; every later command names its git
    directory explicitly, so nothing in the environment can send it elsewhere."""

    def __init__(self, root: Path, common_dir: Path, git_dir: Path | None = None):
        self.root, self.common_dir = root, common_dir
        self.git_dir = git_dir or common_dir

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None) -> "Repo":
        """The repository at ``path`` (any folder inside it); with no ``path``, the one the
        caller's ``GIT_DIR`` (and ``GIT_WORK_TREE``) name if set, else the current folder's."""
        where = Path(path if path is not None else ".").expanduser()
        if not where.is_dir():
            raise InputError(f"not a git repository: {where} (no such directory)")
        located = {k: os.environ[k] for k in ("GIT_DIR", "GIT_WORK_TREE") if k in os.environ} \
            if path is None else {}
        status, out, _ = git_status(where, "rev-parse", "--path-format=absolute", "--git-common-dir",
                                    "--absolute-git-dir", "--is-bare-repository", env=located)
        lines = out.split("\n")
        if status != 0 or len(lines) < 3:
            raise InputError(f"not a git repository: {where}")
        common, git_dir = Path(lines[0]), Path(lines[1])
        if lines[2] == "true":                   # a bare repository has no top level
            return cls(git_dir, common, git_dir)
        status, out, _ = git_status(where, "rev-parse", "--show-toplevel", env=located)
        return cls(Path(out.strip()) if status == 0 and out.strip() else git_dir, common, git_dir)

    def _git(self, *args: str) -> str:
        return git(self.root, f"--git-dir={self.git_dir}", *args)

    def _git_status(self, *args: str) -> tuple[int, str, str]:
        return git_status(self.root, f"--git-dir={self.git_dir}", *args)

    def resolve(self, rev: str) -> str:
        """The full id of the commit ``rev`` names (a tag called ``-dash`` included), or
        :class:`InputError`."""
        status, out, _ = (1, "", "") if not rev else self._git_status(
            "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
        if status != 0:
            raise InputError(f"unknown revision {rev!r} (not a commit in {self.root})")
        return out.strip()

    def is_ancestor(self, a: str, b: str) -> bool:
        return self._git_status("merge-base", "--is-ancestor", a, b)[0] == 0

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
                    else "this is a shallow clone, and GOOD may lie past its edge (git fetch --unshallow)"
                    if (self.common_dir / "shallow").is_file() else "they are on diverged or unrelated histories")
            raise InputError(f"GOOD {good[:12]} is not an ancestor of BAD {bad[:12]}: {hint}")
        return good, bad

    def history(self, good: str, bad: str, first_parent: bool = False
                ) -> tuple[list[tuple[str, tuple[str, ...]]], dict[str, CommitInfo]]:
        """GOOD then every commit of GOOD..BAD, oldest first (topological), with its parents;
        and what the report says about each of them. Two git processes, whatever the size."""
        fp = ["--first-parent"] if first_parent else []
        rows = _parse(self._git("log", "--topo-order", "--reverse", f"--format={_INFO}",
                                *fp, bad, f"^{good}", "--"))
        rows = _parse(self._git("log", "-1", f"--format={_INFO}", good, "--")) + rows
        order = [(info.sha, () if i == 0 else parents) for i, (info, parents) in enumerate(rows)]
        return order, {info.sha: info for info, _ in rows}

    def has_file(self, commit: str, path: str) -> bool:
        """Whether ``commit``'s tree holds ``path`` (relative to the top of the repository)."""
        return self._git_status("cat-file", "-e", f"{commit}:{Path(path).as_posix()}")[0] == 0

    def info(self, sha: str) -> CommitInfo:
        return _parse(self._git("log", "-1", f"--format={_INFO}", sha, "--"))[0][0]

    def show(self, sha: str) -> str:
        """The commit's message, stat and patch (what the demo prints for a culprit)."""
        return self._git("show", "--stat", "--patch", "--format=%n%H %s%n", sha, "--")

    def object_format(self) -> str:
        """``sha1`` or ``sha256``: a private repository reading these objects must use the same."""
        status, out, _ = self._git_status("rev-parse", "--show-object-format")
        return out.strip() if status == 0 and out.strip() else "sha1"

    def checkout_config(self) -> list[tuple[str, str]]:
        """The repository's own settings that decide what a checkout writes: its filters (git-lfs
        installed with ``--local``, git-crypt), line endings. A private checkout without them
        would hand the predicate the stored form (a pointer, ciphertext) instead of the user's file."""
        status, out, _ = self._git_status("config", "--local", "-z", "--get-regexp",
                                          r"^(filter\.|lfs\.|core\.(autocrlf|eol|safecrlf|checkroundtripencoding)$)")
        pairs = [entry.split("\n", 1) for entry in out.split("\0") if entry] if status == 0 else []
        return [(kv[0], kv[1] if len(kv) > 1 else "true") for kv in pairs]

    def read_ref_table(self) -> str:
        """Every ref but the user's bisect state, as ``packed-refs`` lines for a private copy."""
        out = self._git("for-each-ref", "--format=%(objectname) %(refname)")
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
