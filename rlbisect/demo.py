"""`rlbisect demo`: build a simulated TinyAgent history with one faulty commit, bisect it with a
predicate, and show the culprit, its diff and what moved. CLI glue: imports history_fixtures."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path


def _history(keep: Path | None, fault: str, commits: int, bad_at: int):
    """Build the history (in `keep`, or a temporary dir); reuse `keep` if it holds the same one."""
    from history_fixtures import build_history, load_history
    if keep is not None and keep.exists() and any(keep.iterdir()):
        found = load_history(keep)
        same = found is not None and found.fault == fault and len(found.commits) == commits and \
            [s for s, _ in found.commits].index(found.fault_commit) + 1 == bad_at
        if not same:
            raise ValueError(f"--keep {keep} is not empty and does not hold this demo's history")
        return found, True
    return build_history(keep or Path(tempfile.mkdtemp(prefix="rlbisect-demo-")) / "tinyagent",
                         fault, commits, bad_at), False


def run_demo(fault: str = "sign_flip", commits: int = 8, bad_at: int | None = None, keep: Path | None = None,
             json_path: Path | None = None, plot_path: Path | None = None, predicate: str | None = None,
             timeout: float | None = None, options: dict | None = None) -> int:
    """Build, bisect, report. Returns the exit code (0: the fault commit was found)."""
    from rlbisect.bisect import BisectInterrupted, make_predicate, run_bisect
    from rlbisect.bisect.report import live_progress, summary, to_json, write_plot
    bad_at = bad_at if bad_at is not None else min(3, commits)
    history, reused = _history(keep, fault, commits, bad_at)
    root = Path(history.path)
    try:
        print(f"{'reusing' if reused else 'built'} a TinyAgent history in {root}: {commits} commits after "
              f"the initial import, one of which introduces '{fault}' as a real code change")
        for sha, subject in history.commits:
            print(f"  {sha[:10]}  {subject}")
        print(f"bisecting {history.good[:10]}..{history.bad[:10]} with the '{predicate or 'invariants'}' predicate\n")
        pred = make_predicate(predicate, **(options or {}))
        try:
            with live_progress() as (on_status, on_probe):
                result = run_bisect(root, f"{history.good}..{history.bad}", pred, timeout=timeout,
                                    on_probe=on_probe, on_status=on_status)
        except BisectInterrupted as e:
            print(summary(e.result))
            return e.result.exit_code
        print(summary(result))
        hit = result.first_bad == history.fault_commit
        if result.first_bad:
            diff = subprocess.run(["git", "show", "--stat", "--patch", "--format=%n%H %s%n", result.first_bad],
                                  cwd=root, capture_output=True, text=True).stdout
            print(f"\nthe culprit's diff:{diff}")
        print("found the commit that injected the fault" if hit else
              f"MISSED: the fault was injected by {history.fault_commit[:10]}")
        if json_path is not None:
            doc = dict(to_json(result), fault=fault, fault_commit=history.fault_commit, history=history.commits,
                       repo=str(root) if keep else None)
            json_path.write_text(json.dumps(doc, indent=2) + "\n")
        if plot_path is not None:
            write_plot(result, plot_path)
        return 0 if hit else 1
    finally:
        if keep is None:
            shutil.rmtree(root.parent, ignore_errors=True)
