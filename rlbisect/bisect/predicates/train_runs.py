"""How the short-run predicate trains a commit: the user's training command, or a Python function.

Both runners train the code of a probe checkout with each seed asked for and return the runs as
metric rows ``{seed: rows}`` (see :mod:`rlbisect.runlog`), or the probe that explains why not:

* :class:`CommandRunner` runs ``-- CMD ARGS`` once per seed in the checkout, ``{seed}``,
  ``{steps}`` and ``{out}`` (a fresh folder per run, removed afterwards) filled in, and reads
  the metrics file it wrote (``--metrics-file``, by default ``{out}/metrics.jsonl``);
* :class:`FunctionRunner` calls ``MODULE:FN(steps, seed) -> rows`` in a ``python -I`` worker with
  the checkout first on ``sys.path``.

What a failed run means follows the predicates' table: the code under test exiting non-zero or
raising is **bad**; a command that cannot be run (126/127), exits 125, times out, or writes no
metrics is a **skip**.

    python -I -m rlbisect.bisect.predicates.train_runs CHECKOUT --runner MOD:FN --steps 8 --seeds 0,1,2
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from rlbisect.bisect.predicates import PredicateError, Probe, tail
from rlbisect.bisect.predicates.command import file_digests, missing_here, run_command
from rlbisect.bisect.predicates.warm import run_python
from rlbisect.runlog import RunLogError, read_rows

RAISED = 3   # worker exit code: the code under test raised (see the invariants worker)
PLACEHOLDERS = ("{seed}", "{steps}", "{out}")


@dataclass
class Runs:
    """Runs of one checkout: rows per seed, or the probe that says why there are none."""

    rows: dict[int, list[dict]] = field(default_factory=dict)
    failure: Probe | None = None
    seconds: float = 0.0


def _stopped(r, timeout: float | None, what: str) -> Probe | None:
    """The skip for a run that was interrupted or timed out (its verdict says nothing)."""
    if r.interrupted:
        return Probe("skip", reason="interrupted", seconds=r.seconds, cacheable=False)
    if r.timed_out:
        return Probe("skip", reason=f"{what} timed out after {timeout:g}s", seconds=r.seconds,
                     cacheable=False, output=tail(r.stdout + "\n" + r.stderr))
    return None


class CommandRunner:
    """The user's own training command, once per seed (``{seed}``, ``{steps}``, ``{out}``)."""

    def __init__(self, argv: Sequence[str], metrics_file: str, cwd: Path | None = None):
        self.argv, self.metrics_file = list(argv), metrics_file
        if not any("{seed}" in a for a in self.argv):
            raise PredicateError("short-run: the training command must take the seed: put {seed} "
                                 "where it goes, e.g. -- python train.py --seed {seed} --out {out}")
        if os.path.isabs(metrics_file) or ".." in Path(metrics_file).parts:
            raise PredicateError(f"short-run: --metrics-file {metrics_file}: give it under {{out}} "
                                 "or relative to the top of the checkout (e.g. {out}/metrics.jsonl)")
        self.digests = file_digests([a for a in self.argv if "{" not in a], cwd or Path.cwd())

    def identity(self) -> dict:
        return {"command": self.argv, "files": self.digests, "metrics_file": self.metrics_file}

    def preflight(self, repo, commit: str) -> None:
        missing_here(repo, commit, [a for a in self.argv if not os.path.isabs(a) and "{" not in a],
                     "the training command")

    def runs(self, worktree: Path, seeds: list[int], steps: int, timeout: float | None) -> Runs:
        got = Runs()
        for seed in seeds:
            out = Path(tempfile.mkdtemp(prefix=f"rlbisect-{os.getpid()}-run-"))
            try:
                rows, failure, seconds = self._one(worktree, seed, steps, out, timeout)
            finally:
                shutil.rmtree(out, ignore_errors=True)
            got.seconds += seconds
            if failure is not None:
                failure.seconds, got.failure = got.seconds, failure
                return got
            got.rows[seed] = rows
        return got

    def _one(self, worktree: Path, seed: int, steps: int, out: Path, timeout: float | None):
        def fill(text: str) -> str:
            return text.replace("{seed}", str(seed)).replace("{steps}", str(steps)) \
                       .replace("{out}", str(out))
        metrics = worktree / fill(self.metrics_file)   # {out} makes it absolute
        metrics.unlink(missing_ok=True)   # never read a file an earlier seed left in the checkout
        r = run_command([fill(a) for a in self.argv], worktree, timeout)
        if (stopped := _stopped(r, timeout, f"the run with seed {seed}")) is not None:
            return None, stopped, r.seconds
        output = tail(r.stdout + "\n" + r.stderr)
        code = int(r.returncode or 0)
        if code in (125, 126, 127):
            why = "exits 125 (skip)" if code == 125 else f"cannot be run (exit {code})"
            return None, Probe("skip", reason=f"the training command {why} with seed {seed}",
                               output=output), r.seconds
        if code != 0:
            return None, Probe("bad", {"exit_code": float(code)}, f"training failed with seed {seed}"
                               f" (exit {code})", output=output), r.seconds
        try:
            rows = read_rows(metrics)
        except RunLogError as e:
            return None, Probe("skip", reason=f"the run with seed {seed} wrote no metrics: {e}",
                               output=output), r.seconds
        if not rows:
            return None, Probe("skip", reason=f"the run with seed {seed} logged no rows in "
                               f"{self.metrics_file}", output=output), r.seconds
        return rows, None, r.seconds


class FunctionRunner:
    """``MODULE:FN(steps, seed) -> rows`` from the checkout, in an isolated worker."""

    def __init__(self, runner: str):
        self.runner = runner

    def identity(self) -> dict:
        return {"runner": self.runner}

    def preflight(self, repo, commit: str) -> None:
        """A runner module is looked up in the checkout at probe time (absent: a skip)."""

    def runs(self, worktree: Path, seeds: list[int], steps: int, timeout: float | None) -> Runs:
        args = [str(worktree), "--runner", self.runner, "--steps", str(steps),
                "--seeds", ",".join(map(str, seeds))]
        r = run_python(__name__, args, worktree, timeout)
        if (stopped := _stopped(r, timeout, "the runner")) is not None:
            return Runs(failure=stopped, seconds=r.seconds)
        try:
            return Runs({int(k): v for k, v in json.loads(r.stdout).items()}, seconds=r.seconds)
        except (ValueError, AttributeError):
            output = tail(r.stderr)
            last = (output.splitlines() or [f"exit {r.returncode}"])[-1]
            verdict, what = ("bad", "the trainer raised") if r.returncode == RAISED \
                else ("skip", "could not train")
            return Runs(failure=Probe(verdict, reason=f"{what}: {last}", seconds=r.seconds,
                                      output=output), seconds=r.seconds)


def main(argv: list[str] | None = None) -> int:
    """Worker: train the checkout's code with each seed, print {seed: rows} as JSON."""
    import argparse
    import importlib
    import traceback

    from rlbisect.bisect.predicates.invariants import raised_in
    from rlbisect.startup import defer_dynamo
    defer_dynamo()
    p = argparse.ArgumentParser(prog="python -m " + __name__)
    p.add_argument("worktree")
    p.add_argument("--runner", required=True)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seeds", default="0,1,2")
    a = p.parse_args(argv)
    worktree = Path(a.worktree).resolve()
    sys.path.insert(0, str(worktree))
    try:
        module, name = a.runner.rsplit(":", 1)
        fn = getattr(importlib.import_module(module), name)
    except Exception as e:   # the runner is not there at this commit: untestable
        print(f"short-run: cannot load {a.runner}: {type(e).__name__}: {e}".splitlines()[0],
              file=sys.stderr)
        return 2
    try:
        out = {s: list(fn(a.steps, s)) for s in map(int, a.seeds.split(","))}
    except Exception as e:
        traceback.print_exc(limit=-4)
        print(f"short-run: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
        return RAISED if raised_in(e, worktree) else 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    from rlbisect.startup import exit_now
    exit_now(main())
