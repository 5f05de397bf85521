"""Predicates: what decides whether a commit is good, bad or untestable.

A predicate is any object with ``identity()`` and ``probe(worktree, commit, timeout)`` (see
:class:`Predicate`); one that compares against GOOD also has ``setup(good, checkout)``. Kinds are
built by name through a registry, each with a pydantic model of its options (typed, documented,
validated once), so a new kind plugs in without touching the driver::

    register_predicate("invariants", lambda spec: InvariantsPredicate(spec.options),
                       InvariantsOptions, help="the step-0 invariants on the commit's trainer code",
                       default=True)
    pred = make_predicate("invariants", options={"probe_seeds": [1, 2]})

Every predicate does its work in a subprocess through :func:`~.command.run_command` (rlbisect's
own Python workers through :func:`~.warm.run_python`, forked from a server that has torch loaded):
it owns the probe's process group, kills it on timeout, on Ctrl-C (:data:`STOP`) and when rlbisect
dies, and never lets our own failures look like a bad commit.

What a probe's outcome means (the same table for every kind):

    the code under test passes                               good
    the code under test fails, raises, or gives NaN/Inf      bad (the message is kept)
    the commit cannot be probed: the adapter/runner is not
      there, our machinery fails, our timeout, a checkout    skip (the reason is kept)
    the command exits 125 / >= 128                           skip / abort (git's rule)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Protocol, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from rlbisect.errors import InputError

ProbeVerdict = Literal["good", "bad", "skip", "abort"]

#: Set (by the driver's signal handler) to make running probes stop now.
STOP = threading.Event()


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
    detail: dict = field(default_factory=dict)  # structured evidence (e.g. per-seed values)


class Predicate(Protocol):
    """Decides one commit. ``identity()`` keys the cache: two predicates with the same identity
    must give the same verdict on the same tree."""

    def identity(self) -> str: ...

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe: ...


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


@dataclass
class _Kind:
    factory: Callable[[PredicateSpec], Predicate]
    options: type[Options]
    help: str
    takes: Literal["command", "arg"] | None   # what besides options: `-- CMD`, or NAME:ARG


_REGISTRY: dict[str, _Kind] = {}
#: Predicate used when neither ``--predicate`` nor ``-- CMD`` is given (if registered).
DEFAULT_PREDICATE = "invariants"


def register_predicate(name: str, factory: Callable[[PredicateSpec], Predicate],
                       options: type[Options] = Options, help: str = "", default: bool = False,
                       takes: Literal["command", "arg"] | None = None) -> None:
    """Make ``--predicate NAME`` build ``factory(spec)``; ``options`` is the pydantic model its
    options are validated against; ``takes`` says whether it also takes a command (``-- CMD``)
    or an argument (``NAME:ARG``). The factory raises :class:`PredicateError` for input it
    cannot use."""
    global DEFAULT_PREDICATE
    _REGISTRY[name] = _Kind(factory, options, help, takes)
    if default:
        DEFAULT_PREDICATE = name


def known_predicates() -> dict[str, str]:
    """Registered predicate names and their help lines."""
    _load_builtins()
    return {name: kind.help for name, kind in sorted(_REGISTRY.items())}


def options_of(name: str) -> set[str]:
    """The option names predicate ``name`` accepts."""
    _load_builtins()
    return set(_REGISTRY[name].options.model_fields) if name in _REGISTRY else set()


def _load_builtins() -> None:
    from rlbisect.bisect.predicates import command, invariants, replay, short_run  # noqa: F401


def make_predicate(name: str | None = None, command: Sequence[str] = (),
                   options: dict[str, Any] | None = None) -> Predicate:
    """Build the predicate the user asked for; raises :class:`PredicateError` (exit 2).

    ``name`` is ``NAME`` or ``NAME:ARG``; without a name a command means the command predicate
    and no command the default (:data:`DEFAULT_PREDICATE`). ``options`` maps option names to
    values (None = not given); an option the kind does not take is an error, never ignored.
    """
    _load_builtins()
    if name is None:
        name = "command" if command else DEFAULT_PREDICATE
    base, _, arg = name.partition(":")
    if base not in _REGISTRY:
        known = ", ".join(known_predicates())
        hint = "" if command else "; or give a command: rlbisect run GOOD..BAD -- CMD ARGS"
        raise PredicateError(f"unknown predicate {base!r} (known: {known}){hint}")
    kind = _REGISTRY[base]
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
