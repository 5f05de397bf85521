"""How the short-run predicate trains a commit: the user's training command, or a Python function.

Both runners train the code of a probe checkout with each seed asked for and return the runs as
metric rows ``{seed: rows}`` (see :mod:`rlbisect.runs.read`), or the probe that explains why not:

* :class:`CommandRunner` runs ``-- CMD ARGS`` once per seed in the checkout, ``{seed}``,
  ``{steps}`` and ``{out}`` (a fresh folder per run, removed afterwards) filled in, and reads
  the metrics file it wrote (``--metrics-file``, by default ``{out}/metrics.jsonl``);
* :class:`FunctionRunner` calls ``MODULE:FN(steps, seed) -> rows`` in a ``python -I`` worker with
  the checkout first on ``sys.path``.

What a failed run means follows the predicates' table: the code under test exiting non-zero or
raising is **bad**; a command that cannot be run (126/127), exits 125, times out, or writes no
metrics is a **skip**.

    python -I -m rlbisect.bisect.predicates.train_runs --runner MOD:FN --steps 8 --seeds 0,1,2 --code-dir CHECKOUT --reply FILE
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from rlbisect._proc.client import ask
from rlbisect._proc.runner import run
from rlbisect._proc.tempdirs import owned_tempdir
from rlbisect._proc.worker import CannotRun, Reply, first_line, worker_main
from rlbisect.bisect.predicates import PredicateError, Probe, from_worker, stopped, tail
from rlbisect.bisect.predicates.command import file_digests, files_checked, folder_missing, in_folder
from rlbisect._proc.editable import for_workers, own_imports, redirected
from rlbisect.errors import Cause, Verdict
from rlbisect.git.repo import probe_env
from rlbisect.runs.read import RunLogError, read_rows

PLACEHOLDERS = ("{seed}", "{steps}", "{out}")


@dataclass
class Runs:
    """Runs of one checkout: rows per seed, or the probe that says why there are none."""

    rows: dict[int, list[dict]] = field(default_factory=dict)
    failure: Probe | None = None
    seconds: float = 0.0


class CommandRunner:
    """The user's own training command, once per seed (``{seed}``, ``{steps}``, ``{out}``)."""

    def __init__(self, argv: Sequence[str], metrics_file: str, cwd: Path | None = None):
        self.argv, self.metrics_file = list(argv), metrics_file
        if not any("{seed}" in a for a in self.argv):
            raise PredicateError("short-run: the training command must take the seed: put {seed} "
                                 "where it goes, e.g. -- python train.py --seed {seed} --out {out}")
        if os.path.isabs(metrics_file) or ".." in Path(metrics_file).parts:
            raise PredicateError(f"short-run: --metrics-file {metrics_file}: give it under {{out}} "
                                 "or relative to where the command runs (e.g. {out}/metrics.jsonl)")
        self.digests = file_digests([a for a in self.argv if "{" not in a], cwd or Path.cwd())
        self.folder = ""    # where in each checkout it runs: preflight sets yours
        self.imports: tuple[str, ...] = ()   # your editable install's folders: preflight finds them

    def identity(self) -> dict:
        extra: dict[str, object] = {"folder": self.folder} if self.folder else {}   # the top, no imports: as cached before
        extra |= {"imports": list(self.imports)} if self.imports else {}
        return {"command": self.argv, "files": self.digests, "metrics_file": self.metrics_file, **extra}

    def preflight(self, repo, commit: str) -> None:
        self.folder = files_checked(repo, commit, [a for a in self.argv if "{" not in a], "the training command")
        self.imports = own_imports(repo.root, self.argv, probe_env())

    def runs(self, worktree: Path, seeds: list[int], steps: int, timeout: float | None) -> Runs:
        got = Runs()
        for seed in seeds:
            out = owned_tempdir("run")
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
        here = in_folder(worktree, self.folder)
        if here is None:
            return None, folder_missing(self.folder), 0.0
        metrics = here / fill(self.metrics_file)   # {out} makes it absolute
        # never read what an earlier seed left in the checkout (a TensorBoard folder too; a link is
        # removed, never followed: the path is under the checkout or {out}, the folder it names not)
        if metrics.is_dir() and not metrics.is_symlink():
            shutil.rmtree(metrics)
        else:
            metrics.unlink(missing_ok=True)
        r = run([fill(a) for a in self.argv], here, timeout, redirected(probe_env(), worktree, self.imports))
        output = tail(r.stdout + "\n" + r.stderr)
        if r.stopped:
            return None, stopped(r.timed_out, r.seconds, timeout, f"the run with seed {seed}", output), r.seconds
        code = int(r.returncode or 0)
        if code in (125, 126, 127):
            why = "exits 125 (skip)" if code == 125 else f"cannot be run (exit {code})"
            return None, Probe(Verdict.SKIP, reason=f"the training command {why} with seed {seed}",
                               cause=Cause.EXIT_CODE if code == 125 else Cause.CANNOT_RUN,
                               output=output), r.seconds
        if code != 0:
            return None, Probe(Verdict.BAD, {"exit_code": float(code)}, f"training failed with seed {seed}"
                               f" (exit {code})", cause=Cause.EXIT_CODE, output=output), r.seconds
        try:
            rows = read_rows(metrics)
        except RunLogError as e:
            return None, Probe(Verdict.SKIP, reason=f"the run with seed {seed} wrote no metrics: {e}",
                               cause=Cause.CANNOT_RUN, output=output), r.seconds
        if not rows:
            return None, Probe(Verdict.SKIP, reason=f"the run with seed {seed} logged no rows in "
                               f"{self.metrics_file}", cause=Cause.CANNOT_RUN, output=output), r.seconds
        return rows, None, r.seconds


class FunctionRunner:
    """``MODULE:FN(steps, seed) -> rows`` from the checkout, in an isolated worker."""

    def __init__(self, runner: str):
        self.runner = runner
        self.imports: tuple[str, ...] = ()   # your editable install's folders: preflight finds them

    def identity(self) -> dict:
        return {"runner": self.runner, **({"imports": list(self.imports)} if self.imports else {})}

    def preflight(self, repo, commit: str) -> None:
        """A runner module is looked up in the checkout at probe time (absent: a skip)."""
        self.imports = own_imports(repo.root, [sys.executable], probe_env())

    def runs(self, worktree: Path, seeds: list[int], steps: int, timeout: float | None) -> Runs:
        args = ["--runner", self.runner, "--steps", str(steps), "--seeds", ",".join(map(str, seeds))]
        reply, done = ask(__name__, args, worktree, timeout, for_workers(probe_env(), self.imports))
        probe = from_worker(reply, done, timeout, "the runner")
        if reply is None or probe.verdict is not Verdict.GOOD:
            return Runs(failure=probe, seconds=done.seconds)
        return Runs({int(k): v for k, v in reply.data.items()}, seconds=done.seconds)


def _train(a, code_dir: Path) -> Reply:
    """Worker: train the checkout's code with each seed -> the rows per seed (the reply's data)."""
    import importlib
    try:
        module, name = a.runner.rsplit(":", 1)
        fn = getattr(importlib.import_module(module), name)
    except Exception as e:   # the runner is not there at this commit: untestable
        raise CannotRun(f"short-run: cannot load {a.runner}: {first_line(e)}") from None
    rows = {s: list(fn(a.steps, s)) for s in map(int, a.seeds.split(","))}
    return Reply(Verdict.GOOD, Cause.PASSED, f"trained {len(rows)} runs", data=rows)


def main(argv: list[str] | None = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m " + __name__, description=_train.__doc__)
    p.add_argument("--runner", required=True)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seeds", default="0,1,2")
    return worker_main(_train, p, argv)


if __name__ == "__main__":
    from rlbisect._proc.startup import exit_now
    exit_now(main())
