"""Predicates: what decides whether a commit is good, bad or untestable.

A predicate is any object with ``identity()`` and ``probe(worktree, commit, timeout)`` (see
:class:`Predicate`). Predicates are created by name through a registry, so new kinds plug in
without touching the orchestration::

    from rlbisect.bisect.predicates import register_predicate, PredicateSpec
    register_predicate("invariants", lambda spec: InvariantsPredicate(spec.options),
                       help="run the step-0 invariants on the commit's code", default=True)

A probe should run its work in a subprocess through :func:`run_command`: it gives every probe
its own process group, kills the whole group on timeout or when rlbisect is interrupted
(:data:`STOP`), and never lets our own failures look like a bad commit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Protocol, Sequence

from rlbisect import __version__

ProbeVerdict = Literal["good", "bad", "skip", "abort"]

#: Set (by the orchestrator's signal handler) to make running probes stop now.
STOP = threading.Event()
#: Seconds between SIGTERM and SIGKILL when a probe's process group must go.
KILL_GRACE = 2.0


@dataclass
class Probe:
    """The outcome of one probe."""

    verdict: ProbeVerdict
    values: dict[str, float] = field(default_factory=dict)  # what was measured (exit code, ...)
    reason: str = ""            # why, in a few words (shown in the report)
    seconds: float = 0.0        # wall time of the predicate itself
    cacheable: bool = True      # False when the verdict says nothing about the code (our timeout)
    confirm_on_good: bool = False  # bad only if GOOD answers differently (git's 126/127 check)
    output: str = ""            # tail of the predicate's output, for the report


class Predicate(Protocol):
    """Decides one commit. ``identity()`` keys the cache: two predicates with the same identity
    must give the same verdict on the same tree."""

    def identity(self) -> str: ...

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe: ...


class PredicateError(ValueError):
    """A predicate cannot be built from what the user gave (exit 2, one line)."""


@dataclass
class PredicateSpec:
    """What the user asked for: ``--predicate NAME[:ARG]``, ``-- CMD ARGS``, other options."""

    name: str
    arg: str | None = None                                # e.g. "step.pt" in "replay:step.pt"
    command: list[str] = field(default_factory=list)     # argv after "--"
    options: dict[str, str] = field(default_factory=dict)  # e.g. {"adapter": "pkg.mod:factory"}


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
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=wait)
            if sig == signal.SIGTERM:  # leader gone; SIGKILL stragglers without waiting
                os.killpg(proc.pid, signal.SIGKILL)
            return
        except subprocess.TimeoutExpired:
            continue
        except (ProcessLookupError, PermissionError):
            return


def run_command(argv: Sequence[str], cwd: Path, timeout: float | None = None,
                env: dict[str, str] | None = None) -> CommandResult:
    """Run ``argv`` in ``cwd`` in its own process group; stdin is /dev/null.

    Returns git-style codes: a command that cannot be found gives 127 and one that cannot be
    executed 126 (what a shell would report); death by signal N gives 128+N. On ``timeout`` or
    :data:`STOP` the whole process group is killed. Processes the command left behind are
    killed when it exits, so a probe never outlives its worktree.
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
        timed_out = interrupted = False
        deadline = None if timeout is None else t0 + timeout
        while True:
            try:  # short waits so a signal to rlbisect or the deadline is noticed quickly
                proc.wait(timeout=0.05)
                break
            except subprocess.TimeoutExpired:
                if STOP.is_set() or (deadline is not None and time.perf_counter() > deadline):
                    interrupted, timed_out = STOP.is_set(), not STOP.is_set()
                    _kill_group(proc, KILL_GRACE)
                    break
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # stragglers in the group
        except (ProcessLookupError, PermissionError):
            pass
        seconds = time.perf_counter() - t0
        code = proc.returncode if proc.returncode is None or proc.returncode >= 0 \
            else 128 - proc.returncode
        out.seek(0)
        err.seek(0)
        return CommandResult(code, seconds, timed_out, interrupted,
                             out.read().decode(errors="replace"),
                             err.read().decode(errors="replace"))


def _tail(text: str, lines: int = 20, chars: int = 2000) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])[-chars:]


def verdict_from_exit(code: int) -> ProbeVerdict:
    """git bisect run's rule: 0 good, 125 skip, 1..127 bad, anything else aborts."""
    if code == 0:
        return "good"
    if code == 125:
        return "skip"
    return "bad" if 1 <= code <= 127 else "abort"


class CommandPredicate:
    """Any command, with ``git bisect run``'s exit-code semantics, run in the probe worktree."""

    def __init__(self, argv: Sequence[str]):
        if not argv:
            raise PredicateError("the command predicate needs a command: "
                                 "rlbisect run GOOD..BAD -- CMD ARGS")
        self.argv = list(argv)

    def identity(self) -> str:
        return json.dumps({"kind": "command", "argv": self.argv, "rlbisect": __version__})

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe:
        r = run_command(self.argv, worktree, timeout)
        output = _tail(r.stdout + "\n" + r.stderr)
        if r.interrupted:
            return Probe("skip", reason="interrupted", seconds=r.seconds, cacheable=False)
        if r.timed_out:
            return Probe("skip", reason=f"timed out after {timeout:g}s; process group killed",
                         seconds=r.seconds, cacheable=False, output=output)
        code = int(r.returncode or 0)
        verdict = verdict_from_exit(code)
        reason = f"exit {code}"
        if code > 128:
            try:
                reason += f" (killed by {signal.Signals(code - 128).name}?)"
            except ValueError:
                pass
        return Probe(verdict, {"exit_code": float(code)}, reason, r.seconds,
                     confirm_on_good=code in (126, 127), output=output)


def bind(predicate: Predicate, session, good: str) -> None:
    """Before the first probe: give a predicate that compares against GOOD (``setup(good,
    checkout)``, e.g. short-run) GOOD's id and a way to check it out, in a worktree the session
    owns and removes. Other predicates are left as they are."""
    setup = getattr(predicate, "setup", None)
    if setup is not None:
        setup(good, lambda: session.extra_worktree(good))


# name -> (factory, help)
_REGISTRY: dict[str, tuple[Callable[[PredicateSpec], Predicate], str]] = {}
#: Predicate used when neither ``--predicate`` nor ``-- CMD`` is given (if registered).
DEFAULT_PREDICATE = "invariants"


def register_predicate(name: str, factory: Callable[[PredicateSpec], Predicate], help: str = "",
                       default: bool = False) -> None:
    """Make ``--predicate NAME`` (or ``NAME:ARG``) build a predicate with ``factory(spec)``.

    The factory raises :class:`PredicateError` for options it cannot use. ``default=True``
    makes it the predicate used when the user names none and gives no command.
    """
    global DEFAULT_PREDICATE
    _REGISTRY[name] = (factory, help)
    if default:
        DEFAULT_PREDICATE = name


def known_predicates() -> dict[str, str]:
    """Registered predicate names and their help lines."""
    return {name: help for name, (_, help) in sorted(_REGISTRY.items())}


def _command_factory(spec: PredicateSpec) -> Predicate:
    if spec.options or spec.arg:
        raise PredicateError(f"the command predicate takes no options: {spec.options or spec.arg}")
    return CommandPredicate(spec.command)


register_predicate("command", _command_factory, "the command after '--', with git's exit codes")


def make_predicate(name: str | None = None, command: Sequence[str] = (),
                   **options: str) -> Predicate:
    """Build the predicate the user asked for.

    ``name`` is ``NAME`` or ``NAME:ARG``; without a name a command means the command
    predicate and no command means :data:`DEFAULT_PREDICATE`. Raises :class:`PredicateError`.
    """
    if name is None:
        name = "command" if command else DEFAULT_PREDICATE
    base, _, arg = name.partition(":")
    if base not in _REGISTRY:
        known = ", ".join(known_predicates())
        hint = "" if command else "; or give a command: rlbisect run GOOD..BAD -- CMD ARGS"
        raise PredicateError(f"unknown predicate {base!r} (known: {known}){hint}")
    spec = PredicateSpec(base, arg or None, list(command),
                         {k: v for k, v in options.items() if v is not None})
    return _REGISTRY[base][0](spec)
