"""The ``invariants`` predicate: the checks on a commit's own trainer code.

The probe is a worker (:mod:`rlbisect._proc.worker`): ``python -I -m`` this module, or a fork of a
server that imported it. It imports the checker first and only then puts the probe's checkout at
the front of ``sys.path``: the code under test comes from the commit, the checker from the
installed package. Good when no check fails (an n/a one is no failure), bad when one fails or the
code under test raises under them, skip when the checks cannot run on this commit (the adapter is
not there, does not import, comes from outside the checkout, or raises
:class:`~rlbisect.errors.CannotRun`; or every check is n/a here). With
``--checks`` only the selected checks decide (:func:`run_selected`).

    python -I -m rlbisect.bisect.predicates.invariants [--adapter SPEC] [--probe-seeds 1,2] ... --code-dir CHECKOUT --reply FILE
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from pydantic import Field

from rlbisect import __version__
from rlbisect._proc.client import ask
from rlbisect._proc.worker import CannotRun, Reply, worker_main
from rlbisect.bisect.predicates import (PREDICATES, BasePredicate, Kind, Options, Probe,
                                        from_worker)
from rlbisect.bisect.predicates.command import edited_here, file_digests, folder_in, missing_here
from rlbisect._proc.editable import for_workers, own_imports
from rlbisect.errors import Cause, InputError, Verdict
from rlbisect.git.repo import probe_env

TINYAGENT_ADAPTER = "reference_trainer/adapter.py"   #: check.loading.DEFAULT_ADAPTER's file (that module imports torch)


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
    runs: bool = Field(True, description="the run-level checks too: a few real steps of the trainer's "
                       "loop, watched (--no-runs: the step-0 checks only)")
    checks: list[str] | None = Field(None, description="only these checks decide, by number (report "
                                     "order) or name, comma-separated, e.g. 1,6,16 (default: all)")


class InvariantsPredicate(BasePredicate):
    """Good when every registered invariant passes on the commit's code, bad when any fails."""

    def __init__(self, options: InvariantsOptions):
        self.options = options
        self.imports: tuple[str, ...] = ()   # your editable install's folders: preflight finds them

    def identity(self) -> str:
        # an adapter file outside the repository is not in any commit's tree: its content is
        # part of the predicate (a relative FILE.py or a module comes from the probe's checkout)
        where = (self.options.adapter or "").rpartition(":")[0]
        return json.dumps({"kind": "invariants", **self.options.model_dump(),
                           "files": file_digests([where], Path("/")) if os.path.isabs(where) else {},
                           "rlbisect": __version__, **({"imports": list(self.imports)} if self.imports else {})},
                          sort_keys=True)

    def preflight(self, repo, commit: str) -> None:
        """A relative FILE.py adapter is read from each checkout: one in your folder must be in the
        commits without uncommitted edits, and means there what it means here (a path from the top
        of the checkout from here on; one not in your folder is read from the top, as before); the
        checks ``--checks`` names must exist. Without ``--adapter`` the checks are TinyAgent's,
        read from each checkout: a BAD without them would skip every commit, so it is refused."""
        if self.options.adapter is None and not repo.has_file(commit, TINYAGENT_ADAPTER):
            raise InputError(f"the checks without --adapter are TinyAgent's ({TINYAGENT_ADAPTER} in each "
                             f"checkout), and BAD {commit[:12]} has none: name your trainer's adapter "
                             "(--adapter FILE.py:NAME), or give the command that tells a good commit from a bad "
                             "one after --, e.g. rlbisect run GOOD..BAD -- pytest -x tests/test_loss.py")
        where, _, factory = (self.options.adapter or "").rpartition(":")
        if where.endswith(".py") and not os.path.isabs(where) and os.path.isfile(where):
            folder = folder_in(repo)
            missing_here(repo, commit, [where], "the adapter", folder)
            edited_here(repo, [where], "the adapter")
            self.options = self.options.model_copy(
                update={"adapter": f"{os.path.normpath(os.path.join(folder, where))}:{factory}"})
        elif where.endswith(".py") and os.path.isabs(where) and not os.path.isfile(where):   # one file for all
            raise InputError(f"--adapter {self.options.adapter}: no such file {where}")
        if self.options.checks:      # an unknown check, or run-level ones with --no-runs: refused now
            runs_needed(select_checks(self.options.checks), self.options.runs)
        self.imports = own_imports(repo.root, [sys.executable], probe_env())

    def args(self) -> list[str]:
        """The worker's arguments (``python -I -m`` this module, before ``--code-dir``)."""
        o = self.options
        args = ["--episodes", str(o.episodes), "--probe-seeds", ",".join(map(str, o.probe_seeds)),
                "--kl-coef", str(o.kl_coef)]
        args += ["--adapter", o.adapter] if o.adapter else []
        args += [] if o.runs else ["--no-runs"]
        for name in o.checks or []:
            args += ["--check", name]
        for key, value in o.adapter_opts.items():
            args += ["--adapter-opt", f"{key}={json.dumps(value)}"]
        return args

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe:
        reply, done = ask(__name__, self.args(), worktree, timeout, for_workers(probe_env(), self.imports))
        return from_worker(reply, done, timeout, "the checks")


PREDICATES.register("invariants", Kind(lambda spec: InvariantsPredicate(spec.options), InvariantsOptions,
                                       "the invariants on the commit's trainer code (default)"))


def check_names() -> list[str]:
    """Every check in report order, numbered from 1 in ``--checks``: the step-0 invariants
    (:data:`rlbisect.check.invariants.INVARIANTS`), then the run-level checks."""
    from rlbisect.check.invariants import INVARIANTS
    from rlbisect.check.run_level import RUN_CHECKS
    return [*INVARIANTS.names(), *RUN_CHECKS]


def select_checks(given: Sequence[str]) -> list[str]:
    """``--checks`` values -> check names, in report order. Each value is comma-separated numbers
    (report order, from 1) or names (case-insensitive; a name may itself hold ", "); an unknown
    one is an :class:`~rlbisect.errors.InputError` that lists the checks."""
    names = check_names()
    by_name = {n.lower(): n for n in names}
    words = [w.strip() for value in given for w in value.split(",")]
    chosen: set[str] = set()
    i = 0
    while i < len(words):
        if not words[i]:
            i += 1
        elif words[i].isdigit():
            if not 1 <= int(words[i]) <= len(names):
                raise InputError(f"--checks: no check number {words[i]} (1 to {len(names)}: "
                                 + _listing(names) + ")")
            chosen.add(names[int(words[i]) - 1])
            i += 1
        else:       # the longest run of words that is a name: "sampler = trainer log-prob, every step"
            j = next((j for j in range(len(words), i, -1) if ", ".join(words[i:j]).lower() in by_name), None)
            if j is None:
                raise InputError(f"--checks: no check named {words[i]!r} (give numbers or names: "
                                 + _listing(names) + ")")
            chosen.add(by_name[", ".join(words[i:j]).lower()])
            i = j
    if not chosen:
        raise InputError("--checks: name at least one check, e.g. --checks 1,6")
    return [n for n in names if n in chosen]


def _listing(names: list[str]) -> str:
    return "; ".join(f"{k} {n}" for k, n in enumerate(names, 1))


def run_selected(make_adapter: Callable[[int], Any], seeds: list[int], thresholds: Any, runs: bool,
                 only: Sequence[str] | None, raising: bool = False) -> dict:
    """The checks on the adapters ``make_adapter(seed)`` builds -> {name: CheckResult}, only the
    ``only`` checks (all when None): the others are not reported, so they never decide, and
    the run-level checks (about a second) run only when ``runs`` and one of them is selected.
    ``raising``: as in :func:`~rlbisect.check.invariants.sanity_checks`."""
    from rlbisect.check.invariants import check_seeds
    results = check_seeds(make_adapter, seeds, thresholds, runs=runs_needed(only, runs), only=only,
                          raising=raising)
    return results if only is None else {n: r for n, r in results.items() if n in only}


def runs_needed(only: Sequence[str] | None, runs: bool) -> bool:
    """Whether the run-level checks must run; an :class:`InputError` when ``only`` names one
    and ``runs`` is off."""
    from rlbisect.check.run_level import RUN_CHECKS
    if only is None:
        return runs
    wanted = [n for n in only if n in RUN_CHECKS]
    if wanted and not runs:
        raise InputError(f"--checks names a run-level check ({wanted[0]!r}) and --no-runs turns them off")
    return bool(wanted)


def _check(a: argparse.Namespace, code_dir: Path) -> Reply:
    """Worker: check the trainer code in ``code_dir`` with the installed checker."""
    from rlbisect.check.adapter import DEFAULT_ADAPTER, AdapterError, load_adapter, parse_adapter_opts
    from rlbisect.check.results import as_json
    seeds, opts = [int(x) for x in a.probe_seeds.split(",")], parse_adapter_opts(a.adapter_opt)
    spec = a.adapter
    where, _, factory = spec.rpartition(":")
    if where.endswith(".py") and not Path(where).is_absolute():
        spec = f"{code_dir / where}:{factory}"
    try:
        adapters = {seed: load_adapter(spec, episodes=a.episodes, seed=seed, kl_coef=a.kl_coef, **opts)
                    for seed in seeds}
    except AdapterError as e:
        raise CannotRun(f"invariants: {e}") from None
    origin = Path(getattr(sys.modules.get(type(adapters[seeds[0]]).__module__), "__file__", "") or ".")
    if spec == DEFAULT_ADAPTER and code_dir not in origin.resolve().parents:
        # an installed copy of the trainer shadowed the commit's: we would test the wrong code
        raise CannotRun(f"invariants: the adapter came from {origin}, not the checkout")
    # raising: worker_main judges an exception by its traceback, bad (the code under test's) or skip (ours)
    results = run_selected(adapters.__getitem__, seeds, None, a.runs, select_checks(a.check) if a.check else None,
                           raising=True)
    checks = as_json(results)
    failed = [name for name, r in results.items() if r.failed]
    if not failed and all(r.na for r in results.values()):     # as `rlbisect check`: 125, skip
        return Reply(Verdict.SKIP, Cause.CANNOT_RUN, "none of the checks could run here (all n/a)",
                     detail={"checks": checks})
    return Reply(Verdict.BAD if failed else Verdict.GOOD, Cause.FAILED if failed else Cause.PASSED,
                 "FAILED: " + "; ".join(failed) if failed else "all checks pass",
                 {name: r.value for name, r in results.items() if not r.na}, {"checks": checks})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m " + __name__, description=_check.__doc__)
    from rlbisect.check.adapter import DEFAULT_ADAPTER
    p.add_argument("--adapter", default=DEFAULT_ADAPTER)
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--probe-seeds", default="1")
    p.add_argument("--kl-coef", type=float, default=0.1)
    p.add_argument("--adapter-opt", action="append", default=[])
    p.add_argument("--no-runs", dest="runs", action="store_false")
    p.add_argument("--check", action="append", default=[], help="only this check decides (repeatable)")
    return worker_main(_check, p, argv)


if __name__ == "__main__":
    from rlbisect._proc.startup import exit_now
    exit_now(main())
