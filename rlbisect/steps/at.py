"""Replaying a snapshot with another commit's code: ``replay --at REV`` and ``replay:STEP.pt``.

The replay runs in a child process (``python -I -m rlbisect.steps.at``, the worker below) that
imports the trainer from a checkout of that commit and rlbisect from the installed package; this
process loads and validates the snapshot first (a hostile file is refused before any code at REV
runs) and judges. The checkout is a private one (:mod:`rlbisect.sandbox`): the user's working
tree, index, refs, config and hooks are never touched.

    verdict, values, reason = replay_at("step-000005.pt", probe_checkout, timeout=600)

The worker's last stdout line is one JSON object; its exit code says what happened:
    0  {"ok": true, "replayed": {stats, post_update_sha256, update_norm, update_diff_norm, notes}}
    1  {"ok": false, "stage": "update", "error": ...}   the trainer's update raised (a finding)
    2  {"ok": false, "stage": "setup", "error": ...}    cannot replay here (a skip, not a verdict)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rlbisect.bisect.search import Verdict
from rlbisect.errors import Interrupted
from rlbisect.steps.format import Snapshot, load_snapshot
from rlbisect.steps.replay import (Replayed, ReplayError, ReplayReport, UpdateRaised, judge,
                                   relative_diff, replay_in_process)

@dataclass
class WorkerResult:
    status: Literal["ok", "update", "setup", "timeout", "interrupted", "crash"]
    replayed: Replayed | None = None
    error: str = ""


def run_worker(snapshot: str | os.PathLike, code_dir: str | os.PathLike, bug: str | None = None,
               timeout: float | None = None) -> WorkerResult:
    """Replay ``snapshot`` in a child process importing the trainer from ``code_dir``."""
    from rlbisect.bisect.predicates.command import run_command   # process group, timeout, Ctrl-C
    argv = [sys.executable, "-I", "-m", __name__, str(Path(snapshot).resolve()),
            "--code-dir", str(Path(code_dir).resolve())] + (["--bug", bug] if bug else [])
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")   # leave the checkout as checked out
    with tempfile.TemporaryDirectory(prefix=f"rlbisect-{os.getpid()}-worker-") as cwd:
        r = run_command(argv, Path(cwd), timeout, env)
    if r.timed_out:
        return WorkerResult("timeout", error=f"timed out after {timeout:g}s")
    if r.interrupted:
        return WorkerResult("interrupted", error="interrupted")
    try:
        payload = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        tail = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        return WorkerResult("crash", error=f"replay worker exited {r.returncode}: {tail}")
    if payload.get("ok"):
        return WorkerResult("ok", Replayed(**payload["replayed"]))
    return WorkerResult(payload.get("stage", "crash"), error=payload.get("error", "?"))


def replay_in_checkout(snap: Snapshot, snapshot_path: str | os.PathLike,
                       code_dir: str | os.PathLike, bug: str | None = None,
                       tolerance: float = 0.0, timeout: float | None = None) -> ReplayReport:
    """Judge a replay of ``snap`` (loaded from ``snapshot_path``) with the trainer in ``code_dir``.
    Raises ReplayError when it cannot run there (setup failure, timeout, worker crash)."""
    res = run_worker(snapshot_path, code_dir, bug, timeout)
    if res.status == "update":
        return judge(snap, None, tolerance, error=res.error)
    if res.status == "interrupted":
        import signal
        raise Interrupted(signal.SIGINT)
    if res.status != "ok":
        raise ReplayError(res.error)
    return judge(snap, res.replayed, tolerance)


def replay_identity(snapshot_path: str | os.PathLike, bug: str | None = None,
                    tolerance: float = 0.0) -> str:
    """A cache key for the predicate: the snapshot's bytes and the options (the code is the tree)."""
    digest = hashlib.sha256(Path(snapshot_path).read_bytes()).hexdigest()
    return json.dumps({"kind": "replay", "snapshot_sha256": digest, "bug": bug,
                       "tolerance": tolerance})


def replay_at(snapshot_path: str | os.PathLike, checkout: str | os.PathLike,
              timeout: float | None = None, bug: str | None = None, tolerance: float = 0.0
              ) -> tuple[Verdict, dict[str, float], str]:
    """The ``replay:STEP.pt`` predicate on one checkout -> (verdict, values, reason).

    good: the step replays identically; bad: a statistic or the parameters moved, or the update
    raised; skip: it cannot run at this commit (trainer missing or not importable, state that does
    not fit, timeout, worker crash), as git bisect skip. Raises SnapshotError if the snapshot
    itself is unreadable: that is the user's input, check it once before bisecting.
    """
    snap = load_snapshot(snapshot_path)
    try:
        report = replay_in_checkout(snap, snapshot_path, checkout, bug, tolerance, timeout)
    except Interrupted:
        return "skip", {}, "interrupted"
    except ReplayError as e:
        return "skip", {}, f"cannot replay here: {e}"
    if report.error is not None:
        return "bad", {"moved": -1.0}, f"the update raised: {report.error}"
    p = report.params
    values = {"moved": float(len(report.moved)), "digest_equal": float(bool(p["digest_equal"]))}
    if report.rows:
        values["max_rel_diff"] = max(relative_diff(r) for r in report.rows)
    if p["update_diff_norm"] is not None:
        values["update_diff_norm"] = p["update_diff_norm"]
    if report.identical:
        return "good", values, f"step {snap.step} replays identically ({len(report.rows)} statistics)"
    moved = ", ".join(report.moved[:4]) or "parameters"
    return "bad", values, f"step {snap.step} no longer replays: {moved} moved"


def replay(path: str | os.PathLike, *, bug: str | None = None, at: str | None = None,
           repo: str | os.PathLike = ".", tolerance: float = 0.0,
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
        from rlbisect.repo import Repo
        from rlbisect.sandbox import Sandbox
        user = Repo.open(repo)
        sha = user.resolve(at)
        with Sandbox(user) as sandbox:
            report = replay_in_checkout(snap, path, sandbox.checkout(sha), bug, tolerance, timeout)
        report.notes.insert(0, f"trainer code at {at} = {sha[:12]} of {user.root}")
    code = snap.code
    recorded = "unknown commit" if code.commit is None else \
        code.commit[:12] + (" (dirty)" if code.dirty else "")
    report.notes.insert(0, f"recorded by {snap.config.get('trainer')} at {recorded}, "
                           f"torch {snap.torch_version}")
    return report


def adapter_replayer(spec: str, pairs: list[str] | None, bug: str | None):
    """The replay code the command line names: never one read out of the snapshot."""
    from rlbisect.check.adapter import AdapterError, load_adapter, parse_adapter_opts
    adapter = load_adapter(spec, bug=None if bug in (None, "none") else bug, **parse_adapter_opts(pairs))
    if not callable(getattr(adapter, "replay", None)):
        raise AdapterError(f"{spec} returned an adapter without replay(snap, bug)")
    return adapter.replay


# -- the worker -----------------------------------------------------------------------------

def _emit(code: int, **payload) -> int:
    print(json.dumps(payload), flush=True)
    return code


def _import_from(trainer: str, code_dir: Path) -> None:
    """Import ``trainer`` from ``code_dir`` or fail: silently replaying the installed copy would
    report the wrong commit's behaviour."""
    import importlib
    sys.path.insert(0, str(code_dir))
    mod = importlib.import_module(trainer)
    where = Path(getattr(mod, "__file__", None) or next(iter(getattr(mod, "__path__", [])), "?"))
    if code_dir.resolve() not in where.resolve().parents:
        raise ReplayError(f"{trainer} is not in {code_dir} (it was imported from {where.parent})")


def main(argv: list[str] | None = None) -> int:
    """Worker: replay STEP.pt with the trainer package from --code-dir, in this process."""
    import argparse

    from rlbisect.steps.format import SnapshotError
    from rlbisect.steps.replay import REPLAYERS
    ap = argparse.ArgumentParser(prog="python -m " + __name__, description=main.__doc__)
    ap.add_argument("snapshot")
    ap.add_argument("--code-dir", help="directory holding the trainer package (default: installed)")
    ap.add_argument("--bug", help="override the recorded fault switch ('none' for no fault)")
    args = ap.parse_args(argv)
    try:
        snap = load_snapshot(args.snapshot)
        trainer = snap.config.get("trainer")
        if args.code_dir is not None and trainer in REPLAYERS:   # else replay_in_process says why
            _import_from(trainer, Path(args.code_dir))
        replayed = replay_in_process(snap, args.bug)
    except UpdateRaised as e:
        return _emit(1, ok=False, stage="update", error=str(e))
    except (SnapshotError, ReplayError) as e:
        return _emit(2, ok=False, stage="setup", error=str(e))
    except Exception as e:  # noqa: BLE001 - importing another commit's code can fail any way
        return _emit(2, ok=False, stage="setup", error=f"{type(e).__name__}: {e}".splitlines()[0])
    return _emit(0, ok=True, replayed=dataclasses.asdict(replayed))


if __name__ == "__main__":
    sys.exit(main())
