"""Any command as the predicate, with git's exit codes; and the runner every predicate uses.

:func:`run_command` gives each probe its own process group, kills the whole group on timeout or
when rlbisect is interrupted (:data:`STOP`), and registers it with a watchdog process that kills
it if rlbisect itself dies (SIGKILL included): a probe never outlives the run that started it.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from rlbisect import __version__
from rlbisect.errors import InputError
from rlbisect.bisect.predicates import (STOP, Options, PredicateError, Probe, ProbeVerdict,
                                        register_predicate, tail)

#: Seconds between SIGTERM and SIGKILL when a probe's process group must go.
KILL_GRACE = 2.0

_WATCHDOG = r"""
import os, signal, sys
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
live = set()
for line in sys.stdin:
    g = int(line)
    live.discard(-g) if g < 0 else live.add(g)
for g in live:
    try:
        os.killpg(g, signal.SIGKILL)
    except OSError:
        pass
"""


class _Watchdog:
    """One helper process per rlbisect process. It reads process-group ids from a pipe that only
    we can write to; when the pipe closes (we exited or died) it kills the groups still listed."""

    _lock = threading.Lock()
    _pipe: int | None = None
    _owner: int | None = None

    @classmethod
    def _send(cls, line: str) -> None:
        with cls._lock:
            if cls._pipe is None or cls._owner != os.getpid():   # first use, or a forked child
                read, cls._pipe = os.pipe()
                subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHDOG], stdin=read,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
                os.close(read)
                cls._owner = os.getpid()
                atexit.register(os.close, cls._pipe)
            try:
                os.write(cls._pipe, line.encode())
            except OSError:
                pass

    @classmethod
    def watch(cls, pgid: int) -> None:
        cls._send(f"{pgid}\n")

    @classmethod
    def release(cls, pgid: int) -> None:
        cls._send(f"-{pgid}\n")


@dataclass
class CommandResult:
    """What :func:`run_command` saw."""

    returncode: int | None      # exit status; 128+N when killed by signal N; None if not run
    seconds: float
    timed_out: bool = False
    interrupted: bool = False
    stdout: str = ""
    stderr: str = ""


def _kill_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the probe's process group, then SIGKILL whatever is left after ``grace``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_command(argv: Sequence[str], cwd: Path, timeout: float | None = None,
                env: dict[str, str] | None = None) -> CommandResult:
    """Run ``argv`` in ``cwd`` in its own process group; stdin is /dev/null.

    Returns git-style codes: a command that cannot be found gives 127 and one that cannot be
    executed 126 (what a shell would report); death by signal N gives 128+N. On ``timeout`` or
    :data:`STOP` the whole group is killed; processes the command left behind are killed when
    it exits, so a probe never outlives its checkout.
    """
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True)
        except FileNotFoundError as e:
            return CommandResult(127, time.perf_counter() - t0, stderr=str(e))
        except PermissionError as e:
            return CommandResult(126, time.perf_counter() - t0, stderr=str(e))
        _Watchdog.watch(proc.pid)
        timed_out = interrupted = False
        deadline = None if timeout is None else t0 + timeout
        try:
            while True:
                try:   # short waits so a signal to rlbisect or the deadline is noticed quickly
                    proc.wait(timeout=0.05)
                    break
                except subprocess.TimeoutExpired:
                    if STOP.is_set() or (deadline is not None and time.perf_counter() > deadline):
                        interrupted, timed_out = STOP.is_set(), not STOP.is_set()
                        _kill_group(proc, KILL_GRACE)
                        break
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)   # stragglers in the group
            except (ProcessLookupError, PermissionError):
                pass
            _Watchdog.release(proc.pid)
        code = proc.returncode if proc.returncode is None or proc.returncode >= 0 \
            else 128 - proc.returncode
        out.seek(0)
        err.seek(0)
        return CommandResult(code, time.perf_counter() - t0, timed_out, interrupted,
                             out.read().decode(errors="replace"), err.read().decode(errors="replace"))


def verdict_from_exit(code: int) -> ProbeVerdict:
    """git bisect run's rule: 0 good, 125 skip, 1..127 bad, anything else aborts."""
    if code == 0:
        return "good"
    if code == 125:
        return "skip"
    return "bad" if 1 <= code <= 127 else "abort"


def judged_on_good(probe: Probe, check: Probe) -> Probe:
    """git's check at its first run: a bad 126/127 that GOOD (``check``) gives too means the
    command cannot run at all, so the verdict becomes an abort."""
    code = probe.values.get("exit_code")
    if check.verdict == "abort" or check.reason == "interrupted":
        return Probe("abort", probe.values, f"{probe.reason}; unable to verify on GOOD "
                     f"({check.reason})", probe.seconds, output=probe.output)
    if check.values.get("exit_code") == code:
        return Probe("abort", probe.values, f"bogus exit code {code:g} on GOOD too: the command "
                     "probably cannot be run (not found or not executable?)", probe.seconds,
                     output=probe.output)
    return probe


def file_digests(argv: Sequence[str], cwd: Path) -> dict[str, str]:
    """sha256 of the executable and of every argument that names an existing file (relative
    to ``cwd`` or absolute): a predicate whose script changed is a different predicate."""
    out = {}
    for i, arg in enumerate(argv):
        found = shutil.which(arg) if i == 0 and os.sep not in arg else None
        path = Path(found) if found else (cwd / arg if not os.path.isabs(arg) else Path(arg))
        if _is_file(path):
            try:
                out[arg] = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                continue
    return out


def _is_file(path: Path) -> bool:
    """Whether an argument names a file; a shell script or a long option is simply not one."""
    try:
        return path.is_file()
    except (OSError, ValueError):   # a name too long for the filesystem, a NUL byte
        return False


def missing_here(repo, commit: str, paths: list[str], what: str) -> None:
    """:class:`InputError` for the first of ``paths`` that exists relative to the current folder
    but not at that path in ``commit``'s tree: predicates run at the top of a checkout."""
    for rel in paths:
        local = Path.cwd() / rel
        if _is_file(local) and not repo.has_file(commit, rel):
            raise InputError(f"{rel} ({what}) is in your folder but not in the commits: a predicate "
                             "runs in a checkout of each commit, at the top of the repository; give "
                             f"its absolute path ({local.resolve()}) or commit it")


class CommandOptions(Options):
    """The command predicate takes no options: everything is in the command."""


class CommandPredicate:
    """Any command, with ``git bisect run``'s exit-code semantics, run in the probe checkout."""

    def __init__(self, argv: Sequence[str], cwd: Path | None = None):
        if not argv:
            raise PredicateError("the command predicate needs a command: "
                                 "rlbisect run GOOD..BAD -- CMD ARGS")
        self.argv = list(argv)
        self.digests = file_digests(self.argv, cwd or Path.cwd())

    def identity(self) -> str:
        return json.dumps({"kind": "command", "argv": self.argv, "files": self.digests,
                           "rlbisect": __version__}, sort_keys=True)

    def preflight(self, repo, commit: str) -> None:
        """Before the first probe: a file the command names that is in your folder but not at
        the same place in the commit's tree would be 'not found' at every probe."""
        missing_here(repo, commit, [a for a in self.argv if not os.path.isabs(a)], "the command")

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe:
        r = run_command(self.argv, worktree, timeout)
        output = tail(r.stdout + "\n" + r.stderr)
        if r.interrupted:
            return Probe("skip", reason="interrupted", seconds=r.seconds, cacheable=False)
        if r.timed_out:
            return Probe("skip", reason=f"timed out after {timeout:g}s; process group killed",
                         seconds=r.seconds, cacheable=False, output=output)
        code = int(r.returncode or 0)
        reason = f"exit {code}"
        if code > 128:
            try:
                reason += f" (killed by {signal.Signals(code - 128).name}?)"
            except ValueError:
                pass
        return Probe(verdict_from_exit(code), {"exit_code": float(code)}, reason, r.seconds,
                     confirm_on_good=code in (126, 127), output=output)


register_predicate("command", lambda spec: CommandPredicate(spec.command), CommandOptions,
                   "the command after '--', with git's exit codes", takes="command")
