"""Replaying a snapshot with another commit's code: ``replay --at REV`` and ``replay:STEP.pt``.

The replay runs in a probe worker (:mod:`rlbisect._proc.worker`: ``python -I -m rlbisect.steps.at``,
or a fork of a server that imported it) that imports the trainer from a checkout of that commit
and rlbisect from the installed package; this process loads and validates the snapshot first (a
hostile file is refused before any code at REV runs) and judges. The checkout is a private one
(:mod:`rlbisect.git.sandbox`): the user's working tree, index, refs, config and hooks are never
touched.

    verdict, cause, values, reason = replay_at("step-000005.pt", probe_checkout, timeout=600)

The worker answers good with the replayed statistics (the reply's data), bad when the trainer's
update raised (a finding), skip when the step cannot be replayed there.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Sequence

from rlbisect._proc.client import ask
from rlbisect._proc.editable import for_workers, own_imports
from rlbisect._proc.worker import CannotRun, Reply, worker_main
from rlbisect.errors import Cause, Interrupted, Verdict
from rlbisect.git.repo import probe_env
from rlbisect.steps.format import Snapshot, load_snapshot
from rlbisect.steps.replay import (Replayed, ReplayError, ReplayReport, UpdateRaised, judge,
                                   relative_diff, replay_in_process)


def replay_in_checkout(snap: Snapshot, snapshot_path: str | os.PathLike,
                       code_dir: str | os.PathLike, bug: str | None = None,
                       tolerance: float = 0.0, timeout: float | None = None,
                       imports: Sequence[str] = ()) -> ReplayReport:
    """Judge a replay of ``snap`` (loaded from ``snapshot_path``) with the trainer in ``code_dir``
    (and its ``imports`` folders: :func:`~rlbisect._proc.editable.own_imports`).
    Raises ReplayError when it cannot run there (setup failure, timeout, worker crash) and
    Interrupted when a signal stopped it."""
    args = [str(Path(snapshot_path).resolve())] + (["--bug", bug] if bug else [])
    reply, done = ask(__name__, args, Path(code_dir).resolve(), timeout, for_workers(probe_env(), imports))
    if done.interrupted:
        import signal
        raise Interrupted(signal.SIGINT)
    if done.timed_out:
        raise ReplayError(f"timed out after {timeout:g}s")
    if reply is None:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise ReplayError(f"replay worker exited {done.returncode}: {last}")
    if reply.verdict is Verdict.BAD:
        return judge(snap, None, tolerance, error=reply.reason)
    if reply.verdict is Verdict.SKIP:
        raise ReplayError(reply.reason)
    return judge(snap, Replayed(**reply.data), tolerance)


def replay_identity(snapshot_path: str | os.PathLike, bug: str | None = None,
                    tolerance: float = 0.0) -> str:
    """A cache key for the predicate: the snapshot's bytes and the options (the code is the tree)."""
    digest = hashlib.sha256(Path(snapshot_path).read_bytes()).hexdigest()
    return json.dumps({"kind": "replay", "snapshot_sha256": digest, "bug": bug,
                       "tolerance": tolerance})


def replay_at(snapshot_path: str | os.PathLike, checkout: str | os.PathLike,
              timeout: float | None = None, bug: str | None = None, tolerance: float = 0.0,
              imports: Sequence[str] = ()) -> tuple[Verdict, Cause, dict[str, float], str]:
    """The ``replay:STEP.pt`` predicate on one checkout -> (verdict, values, reason).

    good: the step replays identically; bad: a statistic or the parameters moved, or the update
    raised; skip: it cannot run at this commit (trainer missing or not importable, state that does
    not fit, timeout, worker crash), as git bisect skip. Raises SnapshotError if the snapshot
    itself is unreadable: that is the user's input, check it once before bisecting.
    """
    snap = load_snapshot(snapshot_path)
    try:
        report = replay_in_checkout(snap, snapshot_path, checkout, bug, tolerance, timeout, imports)
    except Interrupted:
        return Verdict.SKIP, Cause.INTERRUPTED, {}, "interrupted"
    except ReplayError as e:
        cause = Cause.TIMEOUT if str(e).startswith("timed out") else Cause.CANNOT_RUN
        return Verdict.SKIP, cause, {}, f"cannot replay here: {e}"
    if report.error is not None and report.identical:
        return Verdict.GOOD, Cause.PASSED, {"moved": 0.0}, f"step {snap.step} raises as recorded: {report.error}"
    if report.error is not None:
        return Verdict.BAD, Cause.RAISED, {"moved": -1.0}, f"the update raised: {report.error}"
    if report.recorded_error is not None:
        return (Verdict.BAD, Cause.FAILED, {"moved": -1.0},
                f"step {snap.step} raised {report.recorded_error} when recorded and completes here")
    p = report.params
    values = {"moved": float(len(report.moved)), "digest_equal": float(bool(p["digest_equal"]))}
    if report.rows:
        values["max_rel_diff"] = max(relative_diff(r) for r in report.rows)
    if p["update_diff_norm"] is not None:
        values["update_diff_norm"] = p["update_diff_norm"]
    if report.identical:
        return (Verdict.GOOD, Cause.PASSED, values,
                f"step {snap.step} replays identically ({len(report.rows)} statistics)")
    if p["optimizer_equal"] is not None:
        values["optimizer_equal"] = float(p["optimizer_equal"])
    moved = ", ".join(report.moved[:4]) or ("parameters" if not p["weights_ok"] else "the optimizer's state")
    return Verdict.BAD, Cause.FAILED, values, f"step {snap.step} no longer replays: {moved} moved"


def replay(path: str | os.PathLike, *, bug: str | None = None, at: str | None = None,
           repo: str | os.PathLike | None = None, tolerance: float = 0.0,
           timeout: float | None = None, replayer=None) -> ReplayReport:
    """What ``rlbisect replay`` does: replay the saved update here, or with the code at ``at``
    (a revision of ``repo``, checked out privately). ``replayer``: the `(snap, bug) -> Replayed`
    the command line chose (``--adapter``). Raises SnapshotError / ReplayError / InputError
    (exit 2) when it cannot replay; the report says whether it matched."""
    snap = load_snapshot(path)
    if at is not None and replayer is not None:
        raise ReplayError("--at with --adapter is not supported yet: replay in a checkout of that commit")
    if at is None:
        try:
            report = judge(snap, replay_in_process(snap, bug, replayer), tolerance)
        except UpdateRaised as e:
            report = judge(snap, None, tolerance, error=str(e))
    else:
        from rlbisect.git.repo import Repo
        from rlbisect.git.sandbox import Sandbox
        user = Repo.open(repo)
        sha = user.resolve(at)
        with Sandbox(user) as sandbox:
            report = replay_in_checkout(snap, path, sandbox.checkout(sha), bug, tolerance, timeout,
                                        own_imports(user.root, [sys.executable], probe_env()))
        report.notes.insert(0, f"trainer code at {at} = {sha[:12]} of {user.root}")
    code = snap.code
    recorded = "unknown commit" if code.commit is None else \
        code.commit[:12] + (" (dirty)" if code.dirty else "")
    report.notes.insert(0, f"recorded by {snap.config.get('trainer')} at {recorded}, "
                           f"torch {snap.torch_version}")
    return report


def adapter_replayer(spec: str, pairs: list[str] | None, bug: str | None):
    """The replay code the command line names: never one read out of the snapshot."""
    from rlbisect.check.adapter import AdapterError, Offers, load_adapter, parse_adapter_opts
    adapter = load_adapter(spec, require=("replay",), bug=None if bug in (None, "none") else bug,
                           **parse_adapter_opts(pairs, {"bug": "--bug"}))
    replayer = Offers.of(adapter).replay
    if replayer is None:
        raise AdapterError(f"{spec} returned an adapter without replay(snap, bug)")
    return replayer


# -- the worker -----------------------------------------------------------------------------

#: Trainers whose snapshot name is also the package their replayer imports: replayed only from
#: the checkout (another trainer's replayer imports its own code, with the checkout first on sys.path)
OWN_PACKAGE = ("reference_trainer",)

def _import_from(trainer: str, code_dir: Path) -> None:
    """Import ``trainer`` from ``code_dir`` or fail: silently replaying the installed copy would
    report the wrong commit's behaviour."""
    import importlib
    mod = importlib.import_module(trainer)
    where = Path(getattr(mod, "__file__", None) or next(iter(getattr(mod, "__path__", [])), "?"))
    if code_dir.resolve() not in where.resolve().parents:
        raise ReplayError(f"{trainer} is not in {code_dir} (it was imported from {where.parent})")


def _replay(args: argparse.Namespace, code_dir: Path) -> Reply:
    """Worker: replay STEP.pt with the trainer package from --code-dir, in this process."""
    from rlbisect.steps.format import SnapshotError
    try:
        snap = load_snapshot(args.snapshot)
        trainer = snap.config.get("trainer")
        if trainer in OWN_PACKAGE:
            _import_from(trainer, code_dir)
        replayed = replay_in_process(snap, args.bug)
    except UpdateRaised as e:
        return Reply(Verdict.BAD, Cause.RAISED, str(e))
    except (SnapshotError, ReplayError) as e:
        raise CannotRun(str(e)) from None
    except Exception as e:  # noqa: BLE001 - importing another commit's code can fail any way
        raise CannotRun(f"{type(e).__name__}: {e}".splitlines()[0]) from None
    return Reply(Verdict.GOOD, Cause.PASSED, "replayed", data=dataclasses.asdict(replayed))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m " + __name__, description=_replay.__doc__)
    ap.add_argument("snapshot")
    ap.add_argument("--bug", help="override the recorded fault switch ('none' for no fault)")
    return worker_main(_replay, ap, argv)


if __name__ == "__main__":
    from rlbisect._proc.startup import exit_now
    exit_now(main())
