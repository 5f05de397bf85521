"""Any command as the predicate, with ``git bisect run``'s exit codes.

    rlbisect run v1..main -- pytest -x tests/test_loss.py

The command runs in the probe's checkout through :func:`rlbisect._proc.runner.run` (its own
process group, our timeout, Ctrl-C, the watchdog); a script or file it names is part of the
predicate's identity, so editing it never reuses a cached verdict.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import signal
from pathlib import Path
from typing import Sequence

from rlbisect import __version__
from rlbisect._proc.runner import run
from rlbisect.bisect.predicates import (PREDICATES, BasePredicate, Kind, Options, PredicateError, Probe,
                                        stopped, tail)
from rlbisect.errors import Cause, InputError, Verdict
from rlbisect._proc.editable import own_imports, redirected
from rlbisect.git.repo import git_status, probe_env


def verdict_from_exit(code: int) -> Verdict:
    """git bisect run's rule: 0 good, 125 skip, 1..127 bad, anything else aborts."""
    if code == 0:
        return Verdict.GOOD
    if code == 125:
        return Verdict.SKIP
    return Verdict.BAD if 1 <= code <= 127 else Verdict.ABORT


def judged_on_good(probe: Probe, check: Probe) -> Probe:
    """git's check at its first run: a bad 126/127 that GOOD (``check``) gives too means the
    command cannot run at all, so the verdict becomes an abort."""
    code = probe.values.get("exit_code")
    if check.verdict is Verdict.ABORT or check.cause is Cause.INTERRUPTED:
        return Probe(Verdict.ABORT, probe.values, f"{probe.reason}; unable to verify on GOOD "
                     f"({check.reason})", probe.seconds, output=probe.output)
    if check.values.get("exit_code") == code:
        return Probe(Verdict.ABORT, probe.values, f"bogus exit code {code:g} on GOOD too: the command "
                     "probably cannot be run (not found or not executable?)", probe.seconds,
                     output=probe.output)
    return probe


def file_digests(argv: Sequence[str], cwd: Path) -> dict[str, str]:
    """sha256 of the executable and of every argument that names an existing file (relative to
    ``cwd`` or absolute), also as ``FILE.py:NAME`` or ``--option=FILE``, and of every ``.py`` file
    (``FILE.py[:NAME]``, ``~`` expanded) a shell string among the arguments names, as in ``sh -c
    "rlbisect check --adapter /outside/my_adapter.py:make"``: a predicate whose script or adapter
    file changed is a different predicate."""
    out = {}
    for i, arg in enumerate(argv):
        for name in _named(arg):
            found = shutil.which(name) if i == 0 and name and os.sep not in name else None
            path = Path(found) if found else (cwd / name if not os.path.isabs(name) else Path(name))
            if name and _is_file(path):
                try:
                    out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
                except OSError:
                    continue
        for name in _python_files_in(arg) if i > 0 else ():
            path = Path(name) if os.path.isabs(name) else cwd / name
            if name not in out and _is_file(path):
                try:
                    out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
                except OSError:
                    continue
    return out


def _named(word: str) -> list[str]:
    """The file names one argument may stand for: itself, or the value of ``--option=VALUE``,
    each also without a ``:NAME`` suffix."""
    value = word.split("=", 1)[-1] if word.startswith("-") else word
    return list(dict.fromkeys([value, value.rpartition(":")[0]]))


def _python_files_in(arg: str) -> list[str]:
    """The ``.py`` files a shell string names (an argument with spaces: ``sh -c "..."``)."""
    if not any(c.isspace() for c in arg):
        return []
    try:
        words = shlex.split(arg, comments=True)
    except ValueError:          # not shell syntax after all (an unclosed quote)
        words = arg.split()
    return [os.path.expanduser(name) for word in words for name in _named(word.rstrip(";&|)"))
            if name.endswith(".py")]


def _is_file(path: Path) -> bool:
    """Whether an argument names a file; a shell script or a long option is simply not one."""
    try:
        return path.is_file()
    except (OSError, ValueError):   # a name too long for the filesystem, a NUL byte
        return False


def folder_in(repo) -> str:
    """Where you are in ``repo``, from its top ('' at the top or outside it): a probe runs in the
    same folder of its checkout, so a relative path means there what it means in your shell."""
    try:
        rel = Path.cwd().resolve().relative_to(Path(repo.root).resolve())
    except (ValueError, OSError):
        return ""
    return rel.as_posix() if rel.parts else ""


def in_folder(worktree: Path, folder: str) -> Path | None:
    """``folder`` of the checkout, or None when the commit has no such folder (or it leads out of
    the checkout, a symlink in the commit): never run somewhere the user's paths do not mean."""
    here = worktree / folder
    try:
        inside = here.resolve().is_relative_to(worktree.resolve())
    except OSError:
        return None
    return here if inside and here.is_dir() else None


def folder_missing(folder: str) -> Probe:
    return Probe(Verdict.SKIP, reason=f"this commit has no {folder}/, the folder rlbisect was run "
                 "from (where the command runs)", cause=Cause.CANNOT_RUN)


def missing_here(repo, commit: str, paths: list[str], what: str, folder: str = "") -> None:
    """:class:`InputError` for the first of ``paths`` that exists relative to the current folder
    but not at that path in ``commit``'s tree, read from ``folder`` of it (the top by default)."""
    for rel in paths:
        local = Path.cwd() / rel
        in_tree = os.path.normpath(os.path.join(folder, rel))
        if _is_file(local) and (in_tree == ".." or in_tree.startswith("../")
                                or not repo.has_file(commit, in_tree)):
            where = f"in {folder}/ of it" if folder else "at the top of the repository"
            raise InputError(f"{rel} ({what}) is in your folder but not in the commits: a predicate "
                             f"runs in a checkout of each commit, {where}; give its absolute path "
                             f"({local.resolve()}) or commit it")


#: A path in a probe's output: a word with a folder or an extension in it (quotes and colons apart);
#: one under a probe's checkout (``/tmp/rlbisect-PID-X/probe0-0/data/x``) is read from the top of it.
_PATH_WORD = re.compile(r"[\w.~/-]*[\w-](?:/[\w.-]+|\.[A-Za-z]\w{0,5})\b")
_IN_CHECKOUT = re.compile(r"/rlbisect-[^/]+/[^/]+/(.+)")


def uncommitted_named(repo, commit: str, output: str, folder: str = "") -> list[str]:
    """The paths ``output`` names that are in your working tree (from ``folder``) but not in
    ``commit``'s tree: untracked or ignored files (a dataset, a config), which git bisect's checkout
    in place keeps and a probe's clean checkout does not have."""
    found = []
    for word in dict.fromkeys(_PATH_WORD.findall(output)):
        inside = _IN_CHECKOUT.search(word)
        rel = inside.group(1) if inside else None if os.path.isabs(word) else os.path.normpath(os.path.join(folder, word))
        if rel is None or rel == ".." or rel.startswith("../") or rel in found:
            continue
        try:
            here = (Path(repo.root) / rel).exists()
        except (OSError, ValueError):
            continue
        if here and not repo.has_file(commit, rel):
            found.append(rel)
    return found[:3]


def local_names(argv: Sequence[str]) -> list[str]:
    """The relative file names in ``argv`` that exist in the current folder: what a probe reads
    from its checkout instead of from your folder. The program itself only with a folder in its
    name (``check.sh`` alone is looked up on PATH, as the shell does)."""
    names = []
    for i, arg in enumerate(argv):
        words = [n for n in _named(arg) if i > 0 or os.sep in n] + (_python_files_in(arg) if i > 0 else [])
        names += [n for n in words if n and not os.path.isabs(n) and _is_file(Path.cwd() / n)]
    return list(dict.fromkeys(names))


def files_checked(repo, commit: str, argv: list[str], what: str) -> str:
    """Before the first probe, the files ``argv`` names: in the commit (:func:`missing_here`) and
    without uncommitted edits (:func:`edited_here`) -> the folder the command runs in."""
    folder = folder_in(repo)
    missing_here(repo, commit, [a for a in argv if not os.path.isabs(a)], what, folder)
    edited_here(repo, local_names(argv), what)
    return folder


def edited_here(repo, names: list[str], what: str) -> None:
    """:class:`InputError` when any of ``names`` (relative to the current folder) differs from
    HEAD's copy, staged or not: each probe runs the commit's copy, so the edit would be silently
    left out (git bisect run keeps it across checkouts and runs it). One git call for all."""
    top = str(repo.root)
    inside = [rel for rel in (os.path.relpath(os.path.abspath(n), top) for n in names)
              if rel != ".." and not rel.startswith(".." + os.sep)]   # outside: read as it is
    if not inside:
        return
    status, out, _ = git_status(top, f"--git-dir={repo.git_dir}", "--literal-pathspecs", "diff",
                                "--name-only", "-z", "HEAD", "--", *inside)
    edited = [n for n in out.split("\0") if n] if status == 0 else []   # no HEAD or work tree: no edits
    if edited:
        raise InputError(f"{', '.join(edited)} ({what}) {'has' if len(edited) == 1 else 'have'} "
                         "uncommitted changes, but each probe runs the copy in the commit it tests, "
                         "so your edit would never run: commit it, or copy the edited file outside "
                         "the repository and give that path")


class CommandOptions(Options):
    """The command predicate takes no options: everything is in the command."""


class CommandPredicate(BasePredicate):
    """Any command, with ``git bisect run``'s exit-code semantics, run in the probe checkout."""

    def __init__(self, argv: Sequence[str], cwd: Path | None = None):
        if not argv:
            raise PredicateError("the command predicate needs a command: "
                                 "rlbisect run GOOD..BAD -- CMD ARGS")
        self.argv = list(argv)
        self.digests = file_digests(self.argv, cwd or Path.cwd())
        self.folder = ""    # where in each checkout it runs: preflight sets yours
        self.imports: tuple[str, ...] = ()   # your editable install's folders: preflight finds them

    def identity(self) -> str:
        # the folder and imports only when there are any, so the identities cached before keep their rows
        extra: dict[str, object] = {"folder": self.folder} if self.folder else {}
        extra |= {"imports": list(self.imports)} if self.imports else {}
        return json.dumps({"kind": "command", "argv": self.argv, "files": self.digests,
                           "rlbisect": __version__, **extra}, sort_keys=True)

    def preflight(self, repo, commit: str) -> None:
        """Before the first probe: a file the command names that is in your folder but not at
        the same place in the commit's tree would be 'not found' at every probe; your project's
        editable install is found, to be imported from each checkout."""
        self.folder = files_checked(repo, commit, self.argv, "the command")
        self.imports = own_imports(repo.root, self.argv, probe_env())

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe:
        # RLBISECT_PROBE: an `rlbisect check` in the command knows it is a bisect's probe (exit
        # 125 for an adapter this commit does not have); not part of the cache identity
        here = in_folder(worktree, self.folder)
        if here is None:
            return folder_missing(self.folder)
        r = run(self.argv, here, timeout, {**redirected(probe_env(), worktree, self.imports), "RLBISECT_PROBE": commit})
        output = tail(r.stdout + "\n" + r.stderr)
        if r.stopped:
            return stopped(r.timed_out, r.seconds, timeout, output=output)
        code = int(r.returncode or 0)
        reason = f"exit {code}"
        if code > 128:
            try:
                reason += f" (killed by {signal.Signals(code - 128).name}?)"
            except ValueError:
                pass
        return Probe(verdict_from_exit(code), {"exit_code": float(code)}, reason, r.seconds,
                     Cause.EXIT_CODE, confirm_on_good=code in (126, 127), output=output)


PREDICATES.register("command", Kind(lambda spec: CommandPredicate(spec.command), CommandOptions,
                                    "the command after '--', with git's exit codes", "command"))
