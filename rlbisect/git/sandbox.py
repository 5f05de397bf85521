"""Private checkouts: where probes run and where ``git bisect`` keeps its state.

Nothing rlbisect or a predicate does may reach the user's repository, so every commit is checked
out from a *private repository* in a temporary directory: a fresh ``git init`` (no template, so no
hooks) that borrows the user's objects through ``objects/info/alternates`` and holds a copy of
their refs (so ``git describe`` and ``git log`` in a probe see what they would see at home). The
real ``git bisect`` runs in it, and each probe slot is a worktree *of it*. A predicate's ``git
tag``, ``git config``, ``git stash`` or hook lands there and dies with it; its hooks path points
at an empty directory. The user's repository is only read: its working tree, index, refs,
config, hooks and worktree list are never written.

Submodules are checked out in each probe from the user's own clones of them
(``.git/modules/<name>``), at the commit the probe's tree records; when a recorded commit is not
available locally the probe is a skip that says so (:class:`CheckoutError`).

Our temporary directories are named ``rlbisect-<pid>-*`` and marked as ours: a run killed with
SIGKILL leaves one behind and the next run removes it (:mod:`rlbisect._proc.tempdirs`).
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rlbisect._proc.tempdirs import owned_tempdir, sweep_stale
from rlbisect.errors import GitError
from rlbisect.git.repo import Repo, git, git_status

_SHA = r"[0-9a-f]{40,64}"
_PRIVATE_CONFIG = {"gc.auto": "0", "maintenance.auto": "false", "core.fsmonitor": "false",
                   "advice.detachedHead": "false", "user.name": "rlbisect",
                   "user.email": "rlbisect@localhost", "commit.gpgsign": "false"}


class CheckoutError(GitError):
    """A commit cannot be checked out here (e.g. a submodule commit that is not available):
    the probe is a skip with this reason, never a verdict."""


def _init_private(dest: Path, objects: Path, refs: str = "", shallow: Path | None = None,
                  hooks: Path | None = None, like: Repo | None = None) -> None:
    """A repository at ``dest`` that reads ``objects`` in place and writes only to itself; ``like``:
    the user's repository, whose object format, filters and attributes its checkouts follow."""
    fmt = like.object_format() if like is not None else "sha1"
    git(dest.parent, "init", "-q", "--template=", *([f"--object-format={fmt}"] if fmt != "sha1" else []), str(dest))
    info = dest / ".git" / "objects" / "info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "alternates").write_text(f"{objects}\n")
    (dest / ".git" / "packed-refs").write_text(refs)
    if shallow is not None and shallow.is_file():
        shutil.copy(shallow, dest / ".git" / "shallow")
    # one write instead of a `git config` per key: the file is ours, git just made it
    sections: dict[str, list[str]] = {}
    for key, value in {**_PRIVATE_CONFIG, "core.hooksPath": str(hooks or os.devnull)}.items():
        section, name = key.split(".")
        sections.setdefault(section, []).append(f"\t{name} = {value}\n")
    with (dest / ".git" / "config").open("a") as f:
        f.writelines(f"[{section}]\n{''.join(lines)}" for section, lines in sections.items())
    if like is not None:
        for key, value in like.checkout_config():   # git writes them: it quotes what needs quoting
            git(dest, "config", "--add", key, value)
        attributes = like.common_dir / "info" / "attributes"
        if attributes.is_file():
            (dest / ".git" / "info").mkdir(exist_ok=True)
            shutil.copy(attributes, dest / ".git" / "info" / "attributes")


@dataclass
class Step:
    """Where git's bisection stands after ``start`` or a mark."""

    status: Literal["next", "found", "ambiguous"]
    commit: str | None = None       # the commit git wants tested next (status "next")
    first_bad: str | None = None    # status "found"
    candidates: list[str] = field(default_factory=list)  # possible first bad commits
    remaining: int | None = None    # git: "N revisions left to test after this"
    merge_base: bool = False        # git insists on ``commit``: a merge base of BAD and a good mark


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
    if status == 0 and "Bisecting: a merge base must be tested" in text:
        return Step("next", merge_base=True)
    lines = (err or out).strip().splitlines()
    raise GitError(f"git bisect: {lines[-1] if lines else f'exit status {status}'}")


class Sandbox:
    """A private repository for one run; ``close()`` (or leaving the ``with``) removes it all."""

    def __init__(self, repo: Repo):
        sweep_stale()
        self.repo = repo
        self.tmp = owned_tempdir()
        try:
            (self.tmp / "no-hooks").mkdir()
            self.private = self.tmp / "repo"
            _init_private(self.private, repo.common_dir / "objects", repo.read_ref_table(),
                          repo.common_dir / "shallow", self.tmp / "no-hooks", like=repo)
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        self.slots: dict[str, Path] = {}
        self._add_lock = threading.Lock()   # `worktree add` reads every admin dir: one at a time

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- checkouts ------------------------------------------------------------------------

    def checkout(self, commit: str, slot: str = "probe") -> Path:
        """The slot's directory holding exactly ``commit``'s tracked files and submodules.

        A slot is re-pointed between probes (``checkout -f`` + ``clean -ffdx``: nothing a
        previous probe wrote survives). :class:`CheckoutError` / :class:`GitError` on failure;
        the slot then starts afresh next time.
        """
        path = self.slots.get(slot)
        try:
            if path is None:
                path = self.tmp / f"{slot}-{len(self.slots)}"
                with self._add_lock:
                    git(self.private, "worktree", "add", "-q", "--detach", str(path), commit)
                self.slots[slot] = path
            else:
                _drop_submodules(path)
                git(path, "checkout", "-f", "-q", "--detach", commit)
                git(path, "clean", "-ffdxq")
            _checkout_submodules(path, commit, [self.repo.common_dir / "modules"],
                                 self.repo.root)
        except (GitError, OSError):
            if (stale := self.slots.pop(slot, None)) is not None:   # the slot's path
                shutil.rmtree(stale, ignore_errors=True)
                git_status(self.private, "worktree", "prune")
            raise
        return path

    # -- the bisection ----------------------------------------------------------------------

    def bisect_start(self, good: str, bad: str, first_parent: bool = False) -> Step:
        """``git bisect start --no-checkout BAD GOOD`` in the private repository."""
        git(self.private, "update-ref", "--no-deref", "HEAD", bad)
        fp = ["--first-parent"] if first_parent else []
        return self._bisect("start", "--no-checkout", *fp, bad, good)

    def mark(self, commit: str, verdict: str) -> Step:
        """Tell git ``good|bad|skip`` for ``commit`` and return what it wants next."""
        return self._bisect(verdict, commit)

    def _bisect(self, *args: str) -> Step:
        step = parse_bisect_output(*git_status(self.private, "bisect", *args))
        if step.status == "next":
            step.commit = git(self.private, "rev-parse", "BISECT_HEAD").strip()
        return step

    def bisect_log(self) -> str:
        """``git bisect log``, replayable with ``git bisect replay`` (the file git prints)."""
        path = self.private / ".git" / "BISECT_LOG"
        return path.read_text() if path.is_file() else ""


# -- submodules ----------------------------------------------------------------------------

def _gitlinks(path: Path, commit: str) -> list[tuple[str, str]]:
    """(commit, path) of every submodule the tree of ``commit`` records."""
    out = git(path, "ls-tree", "-r", "-z", commit)
    rows = [entry.split("\t", 1) for entry in out.split("\0") if entry.startswith("160000 ")]
    return [(meta.split()[2], sub) for meta, sub in rows]


def _submodule_names(path: Path) -> dict[str, str]:
    if not (path / ".gitmodules").is_file():
        return {}
    status, out, _ = git_status(path, "config", "-f", ".gitmodules", "--get-regexp",
                                r"^submodule\..*\.path$")
    names = {}
    for line in out.splitlines() if status == 0 else []:
        key, _, sub = line.partition(" ")
        names[sub] = key[len("submodule."):-len(".path")]
    return names


def _gitdir(dot_git: Path) -> Path:
    """A checkout's git directory: ``.git`` itself, or where a ``.git`` file (``gitdir: ...``, as a
    submodule's checkout has, under its name at clone time) points."""
    if dot_git.is_file():
        text = dot_git.read_text(errors="replace").strip()
        if text.startswith("gitdir:"):
            return (dot_git.parent / text[len("gitdir:"):].strip()).resolve()
    return dot_git


def _checkout_submodules(path: Path, commit: str, module_dirs: list[Path], root: Path) -> None:
    """Check out each recorded submodule from the user's local clone of it (recursively); one the
    user never initialised stays an empty folder, as in their own working tree."""
    links = _gitlinks(path, commit)
    if not links:
        return
    names = _submodule_names(path)
    for sha, sub in links:
        name = names.get(sub, sub)
        sources = [d / name for d in module_dirs] + [_gitdir(root / sub / ".git")]
        dest = path / sub
        populated = (root / sub).is_dir() and any((root / sub).iterdir())
        if not populated and not any(s.is_dir() for s in sources):   # never cloned: as under `git bisect`
            dest.mkdir(parents=True, exist_ok=True)
            continue
        source = next((s for s in sources if s.is_dir() and
                       git_status(s, "cat-file", "-e", f"{sha}^{{commit}}")[0] == 0), None)
        if source is None:
            raise CheckoutError(f"submodule {sub} at {sha[:12]} is not in your local clone of it "
                                "(run `git submodule update --init --recursive` in your repository)")
        dest.mkdir(parents=True, exist_ok=True)
        _init_private(dest, source / "objects")
        git(dest, "checkout", "-q", "--detach", sha)
        _checkout_submodules(dest, sha, [source / "modules"], root / sub)


def _drop_submodules(path: Path) -> None:
    """Remove the submodule checkouts of the slot's current commit before it is re-pointed."""
    status, out, _ = git_status(path, "ls-files", "-s", "-z")
    for entry in out.split("\0") if status == 0 else []:
        if entry.startswith("160000 "):
            shutil.rmtree(path / entry.split("\t", 1)[1], ignore_errors=True)


# -- a checkout on another machine, and leftovers ------------------------------------------

def node_checkout(repo_path: str, clone_url: str | None, commit: str, dest: Path) -> Path:
    """``commit`` in ``dest`` on a Ray node: a private repository borrowing the objects of
    ``repo_path`` when this node sees it (a shared filesystem), else a clone of ``clone_url``."""
    if clone_url is None:
        if not Path(repo_path).exists():
            import socket
            raise GitError(f"{repo_path} is not visible on node {socket.gethostname()}: "
                           "give --clone-url")
        repo = Repo.open(repo_path)
        _init_private(dest, repo.common_dir / "objects", repo.read_ref_table(), like=repo)
        modules, root = [repo.common_dir / "modules"], repo.root
    else:
        git(dest.parent, "clone", "-q", "--no-checkout", "--template=", clone_url, str(dest))
        git(dest, "config", "core.hooksPath", os.devnull)
        modules, root = [dest / ".git" / "modules"], dest
    status, _, _ = git_status(dest, "checkout", "-q", "--detach", commit)
    if status != 0:
        hint = " (is it pushed to --clone-url?)" if clone_url else ""
        raise GitError(f"no commit {commit[:12]} in {clone_url or repo_path}{hint}")
    _checkout_submodules(dest, commit, modules, root)
    return dest
