"""The checks on unmodified TRL over a settings grid: every cell must pass (target: 0 failures).

Factors: loss_type x mask_truncated_completions x entropy_coef x beta x scale_rewards x
importance_sampling_level x (num_iterations, steps_per_generation) x gradient_accumulation_steps x
top_entropy_quantile. The full product is thousands of cells at ~1-3 s each, so the grid is
sampled: every level of every factor alone (the others at the demo's default), then a seeded random
sample of the product; the output says how many cells of how many. Each cell runs the step-0
checks (with the variants the adapter offers there); ``--runs`` adds the run-level checks (real
`trainer.train()` steps).

`--only FACTOR=V1,V2` keeps those levels of a factor (the grid then is that slice, e.g. the loss types
that divide by a stored token count: `--only loss_type=dapo,cispo,vespo`).

Usage: python benchmarks/bench_trl_settings.py [--sample 40] [--seed 0] [--runs] [--only FACTOR=V1,V2 ...]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import settings_grid  # noqa: E402

FACTORS: dict[str, list] = {
    "loss_type": ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "vespo", "luspo"],
    "mask_truncated_completions": [False, True],
    "entropy_coef": [0.0, 0.3],
    "kl_coef": [0.1, 0.0],
    "scale_rewards": ["group", "batch", "none"],
    "importance_sampling_level": ["token", "sequence"],
    "iterations/spg": [(1, 2), (2, 2), (1, 4)],
    "gradient_accumulation_steps": [2, 4],
    "top_entropy_quantile": [1.0, 0.8],
}


def settings_of(cell: dict) -> dict:
    out = {k: v for k, v in cell.items() if k != "iterations/spg"}
    out["num_iterations"], out["steps_per_generation"] = cell["iterations/spg"]
    if out["loss_type"] == "luspo":       # LUSPO is defined with a sequence-level ratio (tiny.py sets it)
        out.pop("importance_sampling_level")
    return out


def cells(sample: int, seed: int) -> tuple[list[dict], int]:
    return settings_grid.sampled(FACTORS, settings_grid.one_at_a_time(FACTORS), sample, seed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=40, help="random cells of the product beyond one-at-a-time")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", action="store_true", help="also the run-level checks (slower)")
    ap.add_argument("--only", action="append", default=[], metavar="FACTOR=V1,V2", help="keep these levels")
    args = ap.parse_args()
    for only in args.only:
        factor, _, levels = only.partition("=")
        if factor not in FACTORS:
            raise SystemExit(f"--only {only}: factors are {', '.join(FACTORS)}")
        kept = [v for v in FACTORS[factor] if str(v) in levels.split(",")]
        if not kept:
            raise SystemExit(f"--only {only}: levels of {factor} are {', '.join(map(str, FACTORS[factor]))}")
        FACTORS[factor] = kept
    warnings.simplefilter("ignore")
    from transformers.utils import logging
    logging.set_verbosity_error()
    import trl

    from rlbisect.check.invariants import sanity_checks
    from rlbisect.check.run_level import run_checks
    from rlbisect.frameworks.trl.adapter import demo

    grid, total = cells(args.sample, args.seed)
    print(f"TRL {trl.__version__}: {len(grid)} of {total} cells (each level alone, then {args.sample} sampled "
          f"with seed {args.seed}); {'step-0 and run-level' if args.runs else 'step-0'} checks")
    names = list(FACTORS)
    print(" | ".join(names) + " | stated | by design | n/a | failed")
    failures, t0 = 0, time.perf_counter()
    failing: dict[str, list[dict]] = {}   # check -> the cells it failed at
    for cell in grid:
        with contextlib.redirect_stdout(io.StringIO()):
            adapter = demo(**settings_of(cell))
            results = sanity_checks(adapter)
            if args.runs:
                results = {**results, **run_checks(adapter)}
        failed = [r.name for r in results.values() if r.failed]
        failures += bool(failed)
        for name in failed:
            failing.setdefault(name, []).append(cell)
        by_design = sum(bool(r.by_design) for r in results.values())
        na = sum(bool(r.na) for r in results.values())
        stated = "yes" if not adapter.objective_why else "no"
        print(" | ".join(str(cell[k]) for k in names) + f" | {stated} | {by_design} | {na} | {', '.join(failed) or '-'}",
              flush=True)
    print(f"{failures} of {len(grid)} cells with a failed check ({time.perf_counter() - t0:.0f} s)")
    for name, at in failing.items():   # what every cell a check failed at has in common: where to look
        common = [f"{k}={at[0][k]}" for k in names if all(c[k] == at[0][k] for c in at)]
        print(f"  {name}: {len(at)} cells, all with {', '.join(common) or 'nothing in common'}")


if __name__ == "__main__":
    main()
