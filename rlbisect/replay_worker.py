"""Replay one snapshot with the trainer code in another directory, in this (child) process.

    python -m rlbisect.replay_worker STEP.pt --code-dir WORKTREE [--bug NAME]

rlbisect itself comes from the installed package; only the trainer package (the snapshot's
`config.trainer`, e.g. `reference_trainer`) is imported from `--code-dir`, which goes first on
`sys.path` after rlbisect is loaded. (`PYTHONPATH=WORKTREE` would not do: a worktree of a repo
that holds rlbisect too would shadow the checker with its own old copy.) Run it with a neutral
cwd: `python -m` puts the cwd on `sys.path`.

The last stdout line is one JSON object; the exit code says what happened:
    0  {"ok": true, "replayed": {stats, post_update_sha256, update_norm, update_diff_norm, notes}}
    1  {"ok": false, "stage": "update", "error": ...}   the trainer's update raised (a finding)
    2  {"ok": false, "stage": "setup", "error": ...}    cannot replay here (a skip, not a verdict)
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
from pathlib import Path

from rlbisect.replay import REPLAYERS, ReplayError, UpdateRaised, replay_in_process
from rlbisect.snapshot import SnapshotError, load_snapshot


def _emit(code: int, **payload) -> int:
    print(json.dumps(payload), flush=True)
    return code


def _import_from(trainer: str, code_dir: Path) -> None:
    """Import `trainer` from `code_dir` or fail: silently replaying the installed copy would
    report the wrong commit's behaviour."""
    sys.path.insert(0, str(code_dir))
    mod = importlib.import_module(trainer)
    where = Path(getattr(mod, "__file__", None) or next(iter(getattr(mod, "__path__", [])), "?")).resolve()
    if code_dir.resolve() not in where.parents:
        raise ReplayError(f"{trainer} is not in {code_dir} (it was imported from {where.parent})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rlbisect.replay_worker", description=__doc__.splitlines()[0])
    ap.add_argument("snapshot")
    ap.add_argument("--code-dir", help="directory holding the trainer package (default: as installed)")
    ap.add_argument("--bug", help="override the recorded fault switch ('none' for no fault)")
    args = ap.parse_args(argv)
    try:
        snap = load_snapshot(args.snapshot)
        trainer = snap.config.get("trainer")
        if args.code_dir is not None and trainer in REPLAYERS:  # else replay_in_process says why not
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
