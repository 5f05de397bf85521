"""Predicates: what decides whether a commit is good, bad or untestable.

A predicate is an object with the :class:`Predicate` methods; kinds are built by name through
:data:`PREDICATES`, each with a pydantic model of its options (typed, documented, validated
once), so a new kind plugs in without touching the driver::

    PREDICATES.register("invariants", Kind(InvariantsPredicate, InvariantsOptions,
                                           "the invariants on the commit's trainer code"))
    pred = make_predicate("invariants", options={"probe_seeds": [1, 2]})

Every predicate does its work in a child process (:mod:`rlbisect._proc`): a user's command
through :func:`~rlbisect._proc.runner.run`, rlbisect's own workers through
:func:`~rlbisect._proc.client.run_python`. The child owns the probe's process group, is killed on
timeout, on Ctrl-C and when rlbisect dies, and our own failures never look like a bad commit.

What a probe's outcome means (the same table for every kind, :class:`~rlbisect.errors.Cause`):

    the code under test passes                               good   passed
    the code under test fails, raises, or gives NaN/Inf      bad    failed / raised
    the commit cannot be probed: the adapter or runner is
      not there or does not fit it (it raises CannotRun),
      a checkout fails                                       skip   cannot_run
    rlbisect's own machinery failed, our timeout, Ctrl-C     skip   machinery / timeout / interrupted
    a command exits 125 / >= 128                             skip / abort (git's rule)   exit_code
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Protocol, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from rlbisect._proc.runner import Completed
from rlbisect._proc.worker import Reply
from rlbisect.errors import Cause, InputError, Verdict
from rlbisect.registry import Registry

#: Causes that say nothing about the code: such a probe is never cached, and may be retried.
TRANSIENT = frozenset({Cause.MACHINERY, Cause.TIMEOUT, Cause.INTERRUPTED, Cause.REFERENCE})
_DEFAULT_CAUSE = {Verdict.GOOD: Cause.PASSED, Verdict.BAD: Cause.FAILED, Verdict.SKIP: Cause.EXIT_CODE,
                  Verdict.ABORT: Cause.EXIT_CODE}


@dataclass
class Probe:
    """The outcome of one probe."""

    verdict: Verdict
    values: dict[str, float] = field(default_factory=dict)  # what was measured (exit code, ...)
    reason: str = ""            # why, in a few words (shown in the report; never parsed)
    seconds: float = 0.0        # wall time of the predicate itself
    cause: Cause | None = None  # why, as data (default: the verdict's plain cause)
    confirm_on_good: bool = False  # bad only if GOOD answers differently (git's 126/127 check)
    output: str = ""            # tail of the predicate's output, for the report
    detail: dict = field(default_factory=dict)  # structured evidence (e.g. per-seed values)

    def __post_init__(self) -> None:
        self.verdict = Verdict(self.verdict)
        self.cause = Cause(self.cause) if self.cause is not None else _DEFAULT_CAUSE[self.verdict]

    @property
    def cacheable(self) -> bool:
        """Whether the verdict is about the code (a retry would give it again)."""
        return self.verdict is not Verdict.ABORT and self.cause not in TRANSIENT


def stopped(timed_out: bool, seconds: float, timeout: float | None, what: str = "the probe",
            output: str = "") -> Probe:
    """The skip for a probe our timeout or a signal ended (its verdict says nothing)."""
    if timed_out:
        return Probe(Verdict.SKIP, reason=f"{what} timed out after {timeout:g}s; process group killed",
                     seconds=seconds, cause=Cause.TIMEOUT, output=output)
    return Probe(Verdict.SKIP, reason="interrupted", seconds=seconds, cause=Cause.INTERRUPTED)


def from_worker(reply: Reply | None, done: Completed, timeout: float | None, what: str) -> Probe:
    """The probe a worker's answer gives (:func:`rlbisect._proc.client.ask`)."""
    output = tail(done.stderr)
    if done.stopped:
        return stopped(done.timed_out, done.seconds, timeout, what, output)
    if reply is None:
        last = (output.splitlines() or [f"exit {done.returncode}"])[-1]
        return Probe(Verdict.SKIP, reason=f"{what} ended without an answer: {last}", seconds=done.seconds,
                     cause=Cause.MACHINERY, output=output)
    return Probe(reply.verdict, reply.values, reply.reason, done.seconds, reply.cause, output=output,
                 detail=reply.detail)


class Predicate(Protocol):
    """Decides one commit; the driver calls, in order, ``preflight`` (once, before anything runs),
    ``setup`` (once), ``identity`` (the cache key) and ``probe`` (per commit, maybe in threads)."""

    def preflight(self, repo: Any, commit: str) -> None:
        """Refuse input no probe could use (:class:`~rlbisect.errors.InputError`), e.g. a file the
        command names that is in the user's folder but not in the commits."""

    def setup(self, good: str, checkout: Callable[[], Path]) -> None:
        """GOOD's id and a way to check it out, for predicates that judge against GOOD."""

    def identity(self) -> str:
        """The cache key: two predicates with one identity give one verdict on one tree."""

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe:
        """The verdict on the commit checked out in ``worktree`` (never raises for the code)."""


class BasePredicate:
    """What most predicates need of :class:`Predicate` beyond ``identity`` and ``probe``: nothing."""

    def preflight(self, repo: Any, commit: str) -> None:
        pass

    def setup(self, good: str, checkout: Callable[[], Path]) -> None:
        pass


class PredicateError(InputError):
    """A predicate cannot be built from what the user gave (exit 2, one line)."""


class Options(BaseModel):
    """Base of each predicate's options model: unknown options are refused, values validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass
class PredicateSpec:
    """What the user asked for: ``--predicate NAME[:ARG]``, ``-- CMD ARGS``, typed options."""

    name: str
    arg: str | None = None                       # e.g. "step.pt" in "replay:step.pt"
    command: list[str] = field(default_factory=list)   # argv after "--"
    options: Any = None                          # the kind's Options instance


@dataclass(frozen=True)
class Kind:
    """A kind of predicate: how to build one, its options, its help line."""

    factory: Callable[[PredicateSpec], Predicate]
    options: type[Options]
    help: str
    takes: Literal["command", "arg"] | None = None   # besides options: `-- CMD`, or NAME:ARG


#: Every predicate kind by name.
PREDICATES: Registry[Kind] = Registry("predicate", builtins=(
    "rlbisect.bisect.predicates.invariants", "rlbisect.bisect.predicates.command",
    "rlbisect.bisect.predicates.short_run", "rlbisect.bisect.predicates.replay"))


#: The predicate without ``--predicate`` or ``-- CMD``.
DEFAULT_PREDICATE = "invariants"


def known_predicates() -> dict[str, str]:
    """Registered predicate names and their help lines."""
    return {name: kind.help for name, kind in sorted(PREDICATES.items())}


def options_of(name: str) -> set[str]:
    """The option names predicate ``name`` accepts."""
    return set(PREDICATES.get(name).options.model_fields) if name in PREDICATES else set()


def make_predicate(name: str | None = None, command: Sequence[str] = (),
                   options: dict[str, Any] | None = None) -> Predicate:
    """Build the predicate the user asked for; raises :class:`PredicateError` (exit 2).

    ``name`` is ``NAME`` or ``NAME:ARG``; without a name a command means the command predicate
    and no command the default. ``options`` maps option names to values (None = not given); an
    option the kind does not take is an error, never ignored.
    """
    if name is None:
        name = "command" if command else DEFAULT_PREDICATE
    base, _, arg = name.partition(":")
    if base not in PREDICATES:
        known = ", ".join(known_predicates())
        hint = "" if command else "; or give a command: rlbisect run GOOD..BAD -- CMD ARGS"
        raise PredicateError(f"unknown predicate {base!r} (known: {known}){hint}")
    kind = PREDICATES.get(base)
    if command and kind.takes != "command":
        raise PredicateError(f"the {base} predicate takes no command: drop the '-- CMD' (or "
                             "use --predicate command)")
    if arg and kind.takes != "arg":
        raise PredicateError(f"the {base} predicate takes no argument (got {base}:{arg})")
    given = {k: v for k, v in (options or {}).items() if v is not None}
    unknown = sorted(set(given) - set(kind.options.model_fields))
    if unknown:
        takes = ", ".join(f"--{k.replace('_', '-')}" for k in kind.options.model_fields)
        raise PredicateError(f"the {base} predicate takes no option --{unknown[0].replace('_', '-')}"
                             f" ({f'it takes {takes}' if takes else 'it takes none'})")
    try:
        opts = kind.options(**given)
    except ValidationError as e:
        err = e.errors()[0]
        where = "--" + str(err["loc"][0]).replace("_", "-") if err["loc"] else base
        raise PredicateError(f"{base}: {where}: {err['msg']}") from None
    return kind.factory(PredicateSpec(base, arg or None, list(command), opts))


def tail(text: str, lines: int = 20, chars: int = 2000) -> str:
    """The last lines of a predicate's output: what the report keeps and shows."""
    return "\n".join(text.strip().splitlines()[-lines:])[-chars:]
