"""The `invariants` bisect predicate: run the step-0 checks on a commit's own trainer code.

The probe runs in a fresh interpreter started with `python -I` (so neither the current directory
nor PYTHONPATH can shadow the installed rlbisect), which imports the checker first and only then
puts the probe's worktree at the front of `sys.path`: the code under test comes from the commit,
the checker from the installed package. The worker prints `{check: {"value", "passed"}}` as JSON
and exits 0 (all pass), 1 (any fails) or 2 (could not run: untestable, so the commit is skipped).

    python -I -m rlbisect.bisect.invariant_probe WORKTREE [--adapter SPEC] [--episodes N] ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rlbisect import __version__
from rlbisect.bisect.predicates import Probe, PredicateError, PredicateSpec, _tail, register_predicate, run_command

OPTIONS = {"adapter": None, "episodes": "64", "seed": "1", "kl_coef": "0.1"}


class InvariantsPredicate:
    """Good when every registered invariant passes on the commit's code, bad when any fails."""

    def __init__(self, options: dict[str, str]):
        unknown = set(options) - set(OPTIONS)
        if unknown:
            raise PredicateError(f"the invariants predicate takes no option {sorted(unknown)[0]!r}")
        self.options = {**OPTIONS, **options}
        for key in ("episodes", "seed"):
            if not str(self.options[key]).lstrip("-").isdigit():
                raise PredicateError(f"invariants: {key} must be an integer, not {self.options[key]!r}")

    def identity(self) -> str:
        return json.dumps({"kind": "invariants", **self.options, "rlbisect": __version__}, sort_keys=True)

    def argv(self, worktree: Path) -> list[str]:
        args = [sys.executable, "-I", "-m", "rlbisect.bisect.invariant_probe", str(worktree)]
        for key, value in self.options.items():
            if value is not None:
                args += [f"--{key.replace('_', '-')}", str(value)]
        return args

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe:
        r = run_command(self.argv(worktree), worktree, timeout)
        output = _tail(r.stderr)
        if r.interrupted:
            return Probe("skip", reason="interrupted", seconds=r.seconds, cacheable=False)
        if r.timed_out:
            return Probe("skip", reason=f"timed out after {timeout:g}s", seconds=r.seconds,
                         cacheable=False, output=output)
        try:
            checks = json.loads(r.stdout) if r.returncode in (0, 1) else None
        except ValueError:
            checks = None
        if checks is None:   # the code could not be imported or the checker crashed: untestable
            last = output.splitlines()[-1] if output else f"exit {r.returncode}"
            return Probe("skip", reason=f"could not run the checks: {last}", seconds=r.seconds, output=output)
        values = {name: c["value"] for name, c in checks.items()}
        failed = [name for name, c in checks.items() if not c["passed"]]
        reason = "FAILED: " + "; ".join(failed) if failed else "all checks pass"
        return Probe("bad" if failed else "good", values, reason, r.seconds, output=output)


def _factory(spec: PredicateSpec) -> InvariantsPredicate:
    if spec.command or spec.arg:
        raise PredicateError("the invariants predicate takes no command; drop the '-- CMD' or use --predicate command")
    return InvariantsPredicate(spec.options)


register_predicate("invariants", _factory, "the nine step-0 invariants on the commit's trainer code (default)",
                   default=True)


def main(argv: list[str] | None = None) -> int:
    """Worker: check the trainer code in WORKTREE with the installed checker."""
    import argparse

    from rlbisect.adapter import DEFAULT_ADAPTER, AdapterError, load_adapter
    from rlbisect.invariants import as_json, sanity_checks
    p = argparse.ArgumentParser(prog="rlbisect.bisect.invariant_probe")
    p.add_argument("worktree")
    p.add_argument("--adapter", default=DEFAULT_ADAPTER)
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--kl-coef", type=float, default=0.1)
    a = p.parse_args(argv)
    worktree = Path(a.worktree).resolve()
    sys.path.insert(0, str(worktree))
    spec = a.adapter
    where = spec.rsplit(":", 1)[0]
    if where.endswith(".py") and not Path(where).is_absolute():
        spec = f"{worktree / where}:{spec.rsplit(':', 1)[1]}"
    try:
        adapter = load_adapter(spec, episodes=a.episodes, seed=a.seed, kl_coef=a.kl_coef)
    except AdapterError as e:
        print(f"invariants: {e}", file=sys.stderr)
        return 2
    if spec == DEFAULT_ADAPTER:   # make sure we test the commit's trainer, not an installed copy
        import reference_trainer
        if worktree not in Path(reference_trainer.__file__).resolve().parents:
            print(f"invariants: reference_trainer came from {reference_trainer.__file__}, not the worktree",
                  file=sys.stderr)
            return 2
    try:
        results = sanity_checks(adapter)
    except Exception as e:   # the commit's trainer crashed under the checks: untestable, not bad
        print(f"invariants: the checks crashed: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
        return 2
    print(json.dumps(as_json(results)))
    return 0 if all(r.passed for r in results.values()) else 1

if __name__ == "__main__":
    sys.exit(main())
