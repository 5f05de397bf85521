"""Replaying a snapshot on another commit's code: `rlbisect replay --at REV` and the bisect predicate.

The replay runs in a child process (`python -m rlbisect.replay_worker`) that imports the trainer
from a worktree of that commit and rlbisect from the installed package; this process loads and
validates the snapshot first (a hostile file is refused before any code at REV runs) and judges.

    verdict, values, reason = replay_at("step-000005.pt", probe_worktree, timeout=600)

`worktree_at(repo, rev)` materializes REV in a temporary detached worktree and always removes it;
the user's working tree, index, HEAD and branches are never touched (git only records the
worktree under .git/worktrees/ while it exists).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal

from rlbisect.replay import Replayed, ReplayError, ReplayReport, judge, relative_diff
from rlbisect.snapshot import Snapshot, load_snapshot

Verdict = Literal["good", "bad", "skip"]


class RevError(ValueError):
    """Not a git repository, or a revision that does not name a commit (exit 2)."""


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)


@contextmanager
def worktree_at(repo: str | os.PathLike, rev: str) -> Iterator[tuple[Path, str]]:
    """A temporary detached worktree of `rev` in `repo` -> (path, commit sha); removed on exit."""
    repo = Path(repo)
    if _git(repo, "rev-parse", "--git-dir").returncode != 0:
        raise RevError(f"{repo} is not a git repository")
    found = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    if rev.startswith("-") or found.returncode != 0:
        raise RevError(f"{rev!r} is not a commit in {repo}")
    sha = found.stdout.strip()
    tmp = Path(tempfile.mkdtemp(prefix="rlbisect-replay-"))
    path = tmp / "worktree"
    try:
        added = _git(repo, "worktree", "add", "--detach", str(path), sha)
        if added.returncode != 0:
            raise RevError(f"git worktree add failed: {(added.stderr.strip().splitlines() or ['?'])[-1]}")
        yield path, sha
    finally:
        if _git(repo, "worktree", "remove", "--force", str(path)).returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            _git(repo, "worktree", "prune")  # forget a worktree whose directory is gone
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass
class WorkerResult:
    status: Literal["ok", "update", "setup", "timeout", "crash"]
    replayed: Replayed | None = None
    error: str = ""


def run_worker(snapshot: str | os.PathLike, code_dir: str | os.PathLike, bug: str | None = None,
               timeout: float | None = None) -> WorkerResult:
    """Replay `snapshot` in a child process importing the trainer from `code_dir`."""
    argv = [sys.executable, "-m", "rlbisect.replay_worker", str(Path(snapshot).resolve()),
            "--code-dir", str(Path(code_dir).resolve())] + (["--bug", bug] if bug else [])
    from rlbisect.bisect.predicates import run_command   # process group, timeout, Ctrl-C handling
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")  # leave the probe's worktree as checked out
    with tempfile.TemporaryDirectory(prefix="rlbisect-worker-") as cwd:  # cwd goes on sys.path
        r = run_command(argv, Path(cwd), timeout, env)
    if r.timed_out:
        return WorkerResult("timeout", error=f"timed out after {timeout:g}s")
    if r.interrupted:
        return WorkerResult("timeout", error="interrupted")
    out, err, returncode = r.stdout, r.stderr, r.returncode
    try:
        payload = json.loads(out.strip().splitlines()[-1])
    except (IndexError, ValueError):
        tail = (err.strip().splitlines() or [f"exit {returncode}"])[-1]
        return WorkerResult("crash", error=f"replay worker exited {returncode}: {tail}")
    if payload.get("ok"):
        return WorkerResult("ok", Replayed(**payload["replayed"]))
    return WorkerResult(payload.get("stage", "crash"), error=payload.get("error", "?"))


def replay_in_worktree(snap: Snapshot, snapshot_path: str | os.PathLike, code_dir: str | os.PathLike,
                       bug: str | None = None, tolerance: float = 0.0,
                       timeout: float | None = None) -> ReplayReport:
    """Judge a replay of `snap` (loaded from `snapshot_path`) with the trainer code in `code_dir`.
    Raises ReplayError when it cannot run there (setup failure, timeout, worker crash)."""
    res = run_worker(snapshot_path, code_dir, bug, timeout)
    if res.status == "update":
        return judge(snap, None, tolerance, error=res.error)
    if res.status != "ok":
        raise ReplayError(res.error)
    return judge(snap, res.replayed, tolerance)


def replay_identity(snapshot_path: str | os.PathLike, bug: str | None = None, tolerance: float = 0.0) -> str:
    """A cache key for the predicate: the snapshot's bytes and the options (the code is the tree)."""
    digest = hashlib.sha256(Path(snapshot_path).read_bytes()).hexdigest()
    return json.dumps({"kind": "replay", "snapshot_sha256": digest, "bug": bug, "tolerance": tolerance})


def replay_at(snapshot_path: str | os.PathLike, worktree: str | os.PathLike, timeout: float | None = None,
              bug: str | None = None, tolerance: float = 0.0) -> tuple[Verdict, dict[str, float], str]:
    """The `replay:STEP.pt` bisect predicate on one probe worktree -> (verdict, values, reason).

    good: the step replays identically; bad: a statistic or the parameters moved, or the update
    raised; skip: it cannot run at this commit (trainer missing or not importable, state that does
    not fit, timeout, worker crash), as git bisect skip. Raises SnapshotError if the snapshot
    itself is unreadable: that is the user's input, check it once before bisecting.
    """
    snap = load_snapshot(snapshot_path)
    try:
        report = replay_in_worktree(snap, snapshot_path, worktree, bug, tolerance, timeout)
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


def replay_command(path: str, *, bug: str | None = None, at: str | None = None, repo: str = ".",
                   tolerance: float = 0.0, timeout: float | None = None, as_json: bool = False) -> int:
    """`rlbisect replay`: print the comparison (text or JSON) -> exit code 0 / 1 / 2."""
    from rlbisect.replay import UpdateRaised, render_report, replay_in_process, report_json
    from rlbisect.snapshot import SnapshotError

    def fail(msg: str) -> int:
        print(f"rlbisect: error: {' '.join(str(msg).split())}", file=sys.stderr)
        return 2
    try:
        snap = load_snapshot(path)
        if at is None:
            try:
                report = judge(snap, replay_in_process(snap, bug), tolerance)
            except UpdateRaised as e:
                report = judge(snap, None, tolerance, error=str(e))
        else:
            with worktree_at(repo, at) as (tree, sha):
                report = replay_in_worktree(snap, path, tree, bug, tolerance, timeout)
            report.notes.insert(0, f"trainer code at {at} = {sha[:12]} of {Path(repo).resolve()}")
    except (SnapshotError, ReplayError, RevError) as e:
        return fail(e)
    code = snap.code
    recorded = "unknown commit" if code.commit is None else code.commit[:12] + (" (dirty)" if code.dirty else "")
    report.notes.insert(0, f"recorded by {snap.config.get('trainer')} at {recorded}, torch {snap.torch_version}")
    print(json.dumps(report_json(report), indent=2) if as_json else render_report(report))
    return report.exit_code
