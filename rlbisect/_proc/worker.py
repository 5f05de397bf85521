"""The one worker protocol: how rlbisect's own probe programs are asked and how they answer.

A worker is a module of rlbisect (one of :data:`WORKERS`) whose ``main(argv)`` is built with
:func:`worker_main`. It is run as ``python -I -m MODULE ARGS --code-dir DIR --reply FILE`` (or
forked from a fork server that has already imported it, which gives the same result): rlbisect
and torch come from the installed packages, the code under test from ``--code-dir``, put first
on ``sys.path`` only after rlbisect is imported.

It answers with one JSON object in ``--reply`` (:class:`Reply`) and exits with git bisect run's
contract, so a worker is itself a valid bisect command:

    0    good   the code under test passed
    1    bad    it failed, raised, or went non-finite (the reason is kept)
    125  skip   it cannot be judged here: the adapter or runner is not there or does not fit
                this code (it raised :class:`~rlbisect.errors.CannotRun`), rlbisect failed

A worker that ends without a reply (killed, crashed in rlbisect itself) is a skip, never bad.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from rlbisect.errors import CannotRun, Cause, Verdict

__all__ = ["CannotRun", "IMPORTS_VAR", "Reply", "WORKERS", "first_line", "raised_in", "read_reply", "worker_main"]

#: The programs a fork server may run for a probe: rlbisect's own, nothing a request names.
WORKERS = ("rlbisect.bisect.predicates.invariants", "rlbisect.bisect.predicates.train_runs",
           "rlbisect.steps.at")
_EXIT = {Verdict.GOOD: 0, Verdict.BAD: 1, Verdict.SKIP: 125}
#: Folders of the checkout (``src``; ``os.pathsep``-joined) that go on ``sys.path`` after it: where
#: your project's editable install reads your working tree (rlbisect._proc.editable).
IMPORTS_VAR = "RLBISECT_IMPORTS"


@dataclass
class Reply:
    """A worker's answer."""

    verdict: Verdict
    cause: Cause
    reason: str = ""
    values: dict[str, float] = field(default_factory=dict)   # what was measured
    detail: dict = field(default_factory=dict)               # structured evidence
    data: Any = None                                         # what the caller asked for (rows, stats)

    @property
    def exit_code(self) -> int:
        return _EXIT[self.verdict]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict) -> "Reply":
        return cls(Verdict(obj["verdict"]), Cause(obj["cause"]), str(obj.get("reason", "")),
                   dict(obj.get("values") or {}), dict(obj.get("detail") or {}), obj.get("data"))


def raised_in(error: BaseException, code_dir: Path) -> bool:
    """Whether the innermost frame of ``error`` that is either the code under test (in
    ``code_dir``) or rlbisect's own belongs to the code under test."""
    ours = Path(__file__).resolve().parents[1]
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        path = Path(frame.filename).resolve()
        if code_dir in path.parents:
            return True
        if ours in path.parents:
            return False
    return False


def first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".splitlines()[0]


def worker_main(work: Callable[[argparse.Namespace, Path], Reply], parser: argparse.ArgumentParser,
                argv: list[str] | None = None) -> int:
    """Run ``work(args, code_dir)`` under the protocol: the reply written, the exit code returned.

    ``work`` (or an adapter it calls) raises :class:`~rlbisect.errors.CannotRun` for code that
    cannot be probed; any other exception is
    the code under test's (bad) when its innermost frame of either side is in ``code_dir``, and
    rlbisect's own (a skip) otherwise.
    """
    from rlbisect._proc.startup import defer_dynamo
    defer_dynamo()          # the checks never compile: see rlbisect._proc.startup
    parser.add_argument("--code-dir", required=True, help="the checkout whose code is probed")
    parser.add_argument("--reply", required=True, help="where the JSON reply goes")
    args = parser.parse_args(argv)
    code_dir = Path(args.code_dir).resolve()
    sys.path[:0] = [str(code_dir)] + [str(code_dir / f) for f in os.environ.get(IMPORTS_VAR, "").split(os.pathsep)
                                      if f and f != "."]
    try:
        reply = work(args, code_dir)
    except CannotRun as e:
        reply = Reply(Verdict.SKIP, Cause.CANNOT_RUN, str(e))
    except Exception as e:
        traceback.print_exc(limit=-4)
        reply = (Reply(Verdict.BAD, Cause.RAISED, f"the code under test raised: {first_line(e)}")
                 if raised_in(e, code_dir) else
                 Reply(Verdict.SKIP, Cause.MACHINERY, f"rlbisect failed here: {first_line(e)}"))
    tmp = Path(args.reply).with_suffix(".tmp")
    tmp.write_text(json.dumps(reply.to_json()))
    os.replace(tmp, args.reply)
    return reply.exit_code


def read_reply(path: Path) -> Reply | None:
    """The reply a worker wrote, or None (it wrote none, or not a valid one)."""
    try:
        return Reply.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
