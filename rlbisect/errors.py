"""One error hierarchy and one table of exit codes for every command.

Library code raises a subclass of :class:`RlbisectError`; ``cli.main`` is the one place that turns
it into ``rlbisect <command>: <message>`` on stderr and the error's ``exit_code``. Messages are one
line and say what to do, so no user error ever shows a traceback.

Exit codes (``rlbisect run`` uses all of them; other commands a subset):

    0  done: the first bad commit found, every check passed, a step replayed identically
    1  a finding (a check failed, a replay differs) or an unexpected git failure
    2  bad input: nothing ran, nothing changed
    3  no answer: only skipped commits left, or the evidence is not decisive
    4  the predicate aborted the bisect (exit >= 128, as in ``git bisect run``)
    5  BAD passes the predicate: nothing to bisect
    6  GOOD fails the predicate: the regression is older than the range, or the predicate is broken
    128+N  interrupted by signal N
"""

from __future__ import annotations

FOUND, FINDING, BAD_INPUT, NO_ANSWER, ABORTED, BAD_PASSES, GOOD_FAILS = 0, 1, 2, 3, 4, 5, 6


class RlbisectError(Exception):
    """Base of every error rlbisect reports to a user; ``exit_code`` is what the CLI exits with."""

    exit_code = FINDING

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))   # always one line


class InputError(RlbisectError):
    """Bad input (a path, an option, a revision, a file): refused before any work (exit 2)."""

    exit_code = BAD_INPUT


class GitError(RlbisectError):
    """A git command failed where it should not have (exit 1)."""


class NoAnswer(RlbisectError):
    """The evidence names no commit: only skipped commits left, or not decisive (exit 3)."""

    exit_code = NO_ANSWER


class PredicateAborted(RlbisectError):
    """The predicate asked to stop the bisect (exit 4)."""

    exit_code = ABORTED


def describe(error: BaseException) -> str:
    """An exception as one short line: its type and first line, or for a pydantic validation
    error the first field it refused and why."""
    errors = getattr(error, "errors", None)
    if callable(errors) and type(error).__name__ == "ValidationError":
        first = errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return f"invalid {where}: {first.get('msg', '')}"
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


class Interrupted(RlbisectError):
    """A signal stopped the work after cleanup; ``partial`` is what was learnt until then."""

    def __init__(self, signum: int, partial: object = None):
        import signal
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum, self.partial = signum, partial
        self.exit_code = 128 + signum
