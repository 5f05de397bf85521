"""The ``invariants`` predicate: the step-0 checks on a commit's own trainer code.

The probe runs in a fresh interpreter started with ``python -I`` (neither the current directory
nor PYTHONPATH can shadow the installed rlbisect), which imports the checker first and only then
puts the probe's checkout at the front of ``sys.path``: the code under test comes from the
commit, the checker from the installed package. The worker prints ``{check: {"value",
"passed"}}`` as JSON and exits 0 (all pass) or 1 (a check fails); 3 when the code under test
raised while being checked (bad, the message is kept); anything else means the commit cannot be
probed (the adapter is not there or does not import, rlbisect's own code failed): a skip.

    python -I -m rlbisect.bisect.predicates.invariants CHECKOUT [--adapter SPEC] [--probe-seeds 1,2] ...
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from pydantic import Field

from rlbisect import __version__
from rlbisect.bisect.predicates import Options, Probe, register_predicate, tail
from rlbisect.bisect.predicates.command import file_digests, missing_here
from rlbisect.bisect.predicates.warm import run_python

#: Exit code of the worker when the code under test raised during the checks (Python itself
#: exits 1 on an uncaught error, e.g. when rlbisect cannot be imported: that is a skip).
RAISED = 3


class InvariantsOptions(Options):
    """Options of ``--predicate invariants``."""

    adapter: str | None = Field(None, description="MODULE:FACTORY or FILE.py:FACTORY of the trainer's "
                                "adapter (default: TinyAgent's); a path inside the repository is "
                                "resolved in each probe's checkout")
    episodes: int = Field(64, ge=1, description="episodes in the probe batch")
    probe_seeds: list[int] = Field([1], min_length=1, description="seeds of the probe batches, "
                                   "comma-separated: a check fails if it fails on any")
    kl_coef: float = Field(0.1, ge=0, description="KL weight, so the reference check applies (0: none)")
    adapter_opts: dict[str, Any] = Field(default_factory=dict, description="KEY=VALUE for the "
                                         "adapter's factory (repeatable): the trainer's settings")
    runs: bool = Field(False, description="also the run-level checks (short training runs: same "
                       "seed, same rows; evaluation leaves training alone; optimizer state persists)")


class InvariantsPredicate:
    """Good when every registered invariant passes on the commit's code, bad when any fails."""

    def __init__(self, options: InvariantsOptions):
        self.options = options

    def identity(self) -> str:
        # an adapter file outside the repository is not in any commit's tree: its content is
        # part of the predicate (a relative FILE.py or a module comes from the probe's checkout)
        where = (self.options.adapter or "").rpartition(":")[0]
        return json.dumps({"kind": "invariants", **self.options.model_dump(),
                           "files": file_digests([where], Path("/")) if os.path.isabs(where) else {},
                           "rlbisect": __version__}, sort_keys=True)

    def preflight(self, repo, commit: str) -> None:
        """A relative FILE.py adapter is read from each checkout: it must be in the commits."""
        where = (self.options.adapter or "").rpartition(":")[0]
        if where.endswith(".py") and not os.path.isabs(where):
            missing_here(repo, commit, [where], "the adapter")

    def args(self, worktree: Path) -> list[str]:
        """The worker's arguments (``python -I -m`` this module)."""
        o = self.options
        args = [str(worktree), "--episodes", str(o.episodes),
                "--probe-seeds", ",".join(map(str, o.probe_seeds)), "--kl-coef", str(o.kl_coef)]
        args += ["--adapter", o.adapter] if o.adapter else []
        args += ["--runs"] if o.runs else []
        for key, value in o.adapter_opts.items():
            args += ["--adapter-opt", f"{key}={json.dumps(value)}"]
        return args

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe:
        r = run_python(__name__, self.args(worktree), worktree, timeout)
        output = tail(r.stderr)
        if r.interrupted:
            return Probe("skip", reason="interrupted", seconds=r.seconds, cacheable=False)
        if r.timed_out:
            return Probe("skip", reason=f"timed out after {timeout:g}s", seconds=r.seconds,
                         cacheable=False, output=output)
        last = output.splitlines()[-1] if output else f"exit {r.returncode}"
        try:
            checks = json.loads(r.stdout) if r.returncode in (0, 1) and r.stdout.strip() else None
        except ValueError:
            checks = None
        if checks is None and r.returncode == RAISED:
            return Probe("bad", {}, f"the trainer raised under the checks: {last}", r.seconds,
                         output=output)
        if checks is None:
            return Probe("skip", reason=f"could not run the checks: {last}", seconds=r.seconds,
                         output=output)
        values = {name: c["value"] for name, c in checks.items()}
        failed = [name for name, c in checks.items() if not c["passed"]]
        reason = "FAILED: " + "; ".join(failed) if failed else "all checks pass"
        return Probe("bad" if failed else "good", values, reason, r.seconds, output=output)


register_predicate("invariants", lambda spec: InvariantsPredicate(spec.options), InvariantsOptions,
                   "the step-0 invariants on the commit's trainer code (default)", default=True)


def raised_in(error: BaseException, code_dir: Path) -> bool:
    """Whether the innermost frame of ``error`` that is either the code under test (in
    ``code_dir``) or rlbisect's own belongs to the code under test."""
    ours = Path(__file__).resolve().parents[2]
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        path = Path(frame.filename).resolve()
        if code_dir in path.parents:
            return True
        if ours in path.parents:
            return False
    return False


def main(argv: list[str] | None = None) -> int:
    """Worker: check the trainer code in CHECKOUT with the installed checker."""
    import argparse

    from rlbisect.check.adapter import DEFAULT_ADAPTER, AdapterError, load_adapter, parse_adapter_opts
    from rlbisect.check.invariants import as_json, check_seeds
    from rlbisect.startup import defer_dynamo
    defer_dynamo()
    p = argparse.ArgumentParser(prog="python -m " + __name__)
    p.add_argument("worktree")
    p.add_argument("--adapter", default=DEFAULT_ADAPTER)
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--probe-seeds", default="1")
    p.add_argument("--kl-coef", type=float, default=0.1)
    p.add_argument("--adapter-opt", action="append", default=[])
    p.add_argument("--runs", action="store_true")
    a = p.parse_args(argv)
    seeds, opts = [int(x) for x in a.probe_seeds.split(",")], parse_adapter_opts(a.adapter_opt)
    worktree = Path(a.worktree).resolve()
    sys.path.insert(0, str(worktree))
    spec = a.adapter
    where, _, factory = spec.rpartition(":")
    if where.endswith(".py") and not Path(where).is_absolute():
        spec = f"{worktree / where}:{factory}"
    try:
        adapters = {seed: load_adapter(spec, episodes=a.episodes, seed=seed, kl_coef=a.kl_coef, **opts)
                    for seed in seeds}
    except AdapterError as e:
        print(f"invariants: {e}", file=sys.stderr)
        return 2
    adapter = adapters[seeds[0]]
    where = Path(getattr(sys.modules.get(type(adapter).__module__), "__file__", "") or ".")
    if spec == DEFAULT_ADAPTER and worktree not in where.resolve().parents:
        # an installed copy of the trainer shadowed the commit's: we would test the wrong code
        print(f"invariants: the adapter came from {where}, not the checkout", file=sys.stderr)
        return 2
    try:
        results = check_seeds(adapters.__getitem__, seeds, runs=a.runs)
    except Exception as e:
        traceback.print_exc(limit=-4)
        culprit = raised_in(e, worktree)
        print(f"invariants: {'the trainer' if culprit else 'the checks'} raised: "
              f"{type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
        return RAISED if culprit else 2
    print(json.dumps(as_json(results)))
    return 0 if all(r.passed for r in results.values()) else 1


if __name__ == "__main__":
    from rlbisect.startup import exit_now
    exit_now(main())
