"""Every outcome named once: the exit codes, a probe's verdict and its cause, and the errors.

Library code raises a subclass of :class:`RlbisectError`; the CLI is the one place that turns it
into ``rlbisect <command>: <message>`` on stderr and the error's ``exit_code``. Messages are one
line and say what to do, so no user error ever shows a traceback. What a probe found is a
:class:`Verdict` with a :class:`Cause`: data that code branches on, never a sentence it parses.
"""

from __future__ import annotations

from enum import Enum, IntEnum


class ExitCode(IntEnum):
    """What every ``rlbisect`` command exits with (each uses the members that apply to it)."""

    #: done: the first bad commit found, every check passed, a step replayed identically,
    #: nothing moved beyond GOOD's seed spread
    OK = 0
    #: a finding: a check failed, a replay differs, a metric moved; or an unexpected git failure
    FINDING = 1
    #: bad input: nothing ran, nothing changed
    USAGE = 2
    #: no answer: only skipped commits left, the evidence is not decisive, the spread cannot tell
    NO_ANSWER = 3
    #: the predicate aborted the bisect (exit >= 128, as in ``git bisect run``)
    ABORTED = 4
    #: BAD passes the predicate: nothing to bisect
    BAD_PASSES = 5
    #: GOOD fails the predicate: the regression is older than the range, or the predicate is broken
    GOOD_FAILS = 6
    #: the checks could not run on this code at all (the adapter does not fit it, the trainer could
    #: not be built for reasons outside the code under test): git bisect run's "skip", so
    #: ``rlbisect check`` as a bisect command skips such commits
    CANNOT_RUN = 125
    #: interrupted by signal N exits 128 + N
    INTERRUPTED = 128


class Verdict(str, Enum):
    """What one probe says about one commit (``git bisect``'s marks, plus abort)."""

    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"     # this commit cannot be judged; the bisect goes around it
    ABORT = "abort"   # the bisect cannot go on (the predicate exited >= 128)

    def __str__(self) -> str:      # "good", not "Verdict.GOOD", in messages and reports
        return self.value


class Status(str, Enum):
    """How a bisect ended; :attr:`exit_code` is what ``rlbisect run`` exits with."""

    FOUND = "found"                 # the first bad commit, on evidence that names it
    AMBIGUOUS = "ambiguous"         # only skipped commits left, or stopped early: candidates listed
    UNSURE = "unsure"               # a noisy search not sure enough within its budget
    ABORTED = "aborted"             # the predicate asked to stop
    BAD_PASSES = "bad_passes"       # BAD passes: nothing to bisect
    GOOD_FAILS = "good_fails"       # GOOD fails: the regression is older, or the predicate broken
    INTERRUPTED = "interrupted"     # a signal stopped it (exit 128 + N)

    @property
    def exit_code(self) -> int:
        return _STATUS_EXIT[self]

    def __str__(self) -> str:
        return self.value


_STATUS_EXIT = {Status.FOUND: ExitCode.OK, Status.AMBIGUOUS: ExitCode.NO_ANSWER,
                Status.UNSURE: ExitCode.NO_ANSWER, Status.ABORTED: ExitCode.ABORTED,
                Status.BAD_PASSES: ExitCode.BAD_PASSES, Status.GOOD_FAILS: ExitCode.GOOD_FAILS,
                Status.INTERRUPTED: ExitCode.INTERRUPTED}


class Cause(str, Enum):
    """Why a probe ended as it did; what the driver and the cache decide on (never the reason)."""

    PASSED = "passed"               # the code under test passed
    FAILED = "failed"               # the code under test failed the predicate
    RAISED = "raised"               # the code under test raised or went non-finite (bad)
    EXIT_CODE = "exit_code"         # a command's own exit status decided (125 included)
    CANNOT_RUN = "cannot_run"       # the adapter, runner or trainer is not usable here (skip)
    MACHINERY = "machinery"         # rlbisect's own machinery failed (skip, never cached)
    TIMEOUT = "timeout"             # our timeout killed it (skip, never cached)
    INTERRUPTED = "interrupted"     # a signal to rlbisect stopped it (skip, never cached)
    UNDECIDED = "undecided"         # noisy evidence that does not decide (skip)
    MEASURED = "measured"           # one run measured for the measured search: a number, no verdict
    REFERENCE = "reference"         # GOOD's own runs, which the verdict needs, failed (skip, never cached)

    def __str__(self) -> str:
        return self.value


class RlbisectError(Exception):
    """Base of every error rlbisect reports to a user; ``exit_code`` is what the CLI exits with."""

    exit_code: int = ExitCode.FINDING

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))   # always one line


class InputError(RlbisectError):
    """Bad input (a path, an option, a revision, a file): refused before any work (exit 2)."""

    exit_code = ExitCode.USAGE


class CannotRun(RlbisectError):
    """The code under test cannot be checked here at all (exit 125, git bisect run's skip): the
    adapter does not fit this code (it, or the trainer it imports, fails to import; a framework
    attribute it reaches for is not there; its factory cannot build the trainer for reasons
    outside the code under test). An adapter raises it, from its factory or from any probe point,
    for a capability the code it runs on lacks; the code under test raising or producing NaN is
    never this, it is a finding (exit 1)."""

    exit_code = ExitCode.CANNOT_RUN


class TrainingFailed(RlbisectError):
    """The trainer raised in the middle of a run (exit 1, a finding, as the trainer's own exit
    would be): the message says at which step, what the detectors saw before it and where the
    rows and the failing step's state were kept."""


class GitError(RlbisectError):
    """A git command failed where it should not have (exit 1)."""


class NoAnswer(RlbisectError):
    """The evidence names no commit: only skipped commits left, or not decisive (exit 3)."""

    exit_code = ExitCode.NO_ANSWER


class PredicateAborted(RlbisectError):
    """The predicate asked to stop the bisect (exit 4)."""

    exit_code = ExitCode.ABORTED


class Interrupted(RlbisectError):
    """A signal stopped the work after cleanup; ``partial`` is what was learnt until then."""

    def __init__(self, signum: int, partial: object = None):
        import signal
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum, self.partial = signum, partial
        self.exit_code = ExitCode.INTERRUPTED + signum


def printable(text: str) -> str:
    """``text`` safe for a terminal: control characters (escape sequences included) shown as
    ``\\x1b``-style escapes, newlines and tabs kept. For strings read from files a user did not
    write themselves: snapshots, metric files."""
    return "".join(c if c.isprintable() or c in "\n\t" else c.encode("unicode_escape").decode("ascii")
                   for c in text)


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
