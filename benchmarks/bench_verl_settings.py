"""The step-0 checks on unmodified verl over a settings grid: every cell must pass (target: 0 failures).

Factors: loss_agg_mode x adv_estimator x norm_adv_by_std_in_grpo x KL loss (off, or on with each
kl_loss_type) x micro-batching (fixed size 2; dynamic batch size at token budgets that split the
rows unevenly) x entropy_coeff. The product is thousands of cells at ~2-3 s each, so the grid is:
every level of every factor alone (the others at the demo's default), then every loss_agg_mode x
adv_estimator pair with the other factors turned cyclically (every level of each appears many
times), then ``--sample`` seeded random cells of the product. Each cell runs the step-0 checks (with
the variant the adapter offers there); a check verl fails on purpose is "by design", not a failure.

Usage: python benchmarks/bench_verl_settings.py [--sample 20] [--seed 0] [--pairs/--no-pairs]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import settings_grid  # noqa: E402

KL_LEVELS = ["low_var_kl", "off", "kl", "k1", "mse", "k2", "k3", "abs", "k3+"]   # the demo's first
FACTORS: dict[str, list] = {
    "loss_agg_mode": ["token-mean", "seq-mean-token-mean", "token-sum", "seq-mean-token-sum",
                      "seq-mean-token-sum-norm"],
    "adv_estimator": ["grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "reinforce_plus_plus",
                      "reinforce_plus_plus_baseline", "opo", "gpg"],
    "norm_adv_by_std_in_grpo": [True, False],
    "kl": KL_LEVELS,
    "micro": ["fixed 2", "dynamic 20", "dynamic 28"],
    "entropy_coeff": [0.0, 0.01],
}


def settings_of(cell: dict) -> dict:
    out = {k: v for k, v in cell.items() if k not in ("kl", "micro")}
    out["use_kl_loss"] = cell["kl"] != "off"
    if out["use_kl_loss"]:
        out["kl_loss_type"] = cell["kl"]
    kind, size = cell["micro"].split()
    out["use_dynamic_bsz"] = kind == "dynamic"
    out["max_token_len" if kind == "dynamic" else "micro_batch_size"] = int(size)
    return out


def not_offered(demo) -> list[tuple[str, str]]:
    """The levels this verl does not know (a mode or estimator a later release added is no failure
    of an older one): the adapter refuses them when built, by verl's own validation."""
    gone = []
    for factor, key in (("loss_agg_mode", "loss_agg_mode"), ("adv_estimator", "adv_estimator"), ("kl", "kl_loss_type")):
        for level in FACTORS[factor]:
            try:
                if level != "off":
                    demo(**{key: level})
            except ValueError:
                gone.append((factor, level))
    return gone


def cells(sample: int, seed: int, pairs: bool) -> tuple[list[dict], int]:
    chosen = settings_grid.one_at_a_time(FACTORS)
    default = chosen[0]
    if pairs:
        others = ["norm_adv_by_std_in_grpo", "kl", "micro", "entropy_coeff"]
        for i, (mode, est) in enumerate(itertools.product(FACTORS["loss_agg_mode"], FACTORS["adv_estimator"])):
            cell = {**default, "loss_agg_mode": mode, "adv_estimator": est,
                    **{k: FACTORS[k][(i + j) % len(FACTORS[k])] for j, k in enumerate(others)}}
            if cell not in chosen:
                chosen.append(cell)
    return settings_grid.sampled(FACTORS, chosen, sample, seed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=20, help="random cells of the product beyond the rest")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-pairs", dest="pairs", action="store_false", help="skip the loss_agg_mode x estimator pairs")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from transformers.utils import logging
    logging.set_verbosity_error()
    import verl

    from rlbisect.check.invariants import sanity_checks
    from rlbisect.frameworks.verl import demo

    gone = not_offered(demo)
    for factor, level in gone:
        FACTORS[factor].remove(level)
    grid, total = cells(args.sample, args.seed, args.pairs)
    print(f"verl {verl.__version__}: {len(grid)} of {total} cells (each level alone, "
          f"{'every loss_agg_mode x estimator pair, ' if args.pairs else ''}{args.sample} sampled with seed "
          f"{args.seed}); step-0 checks" + (f"; not in this verl: {', '.join(f'{f}={v}' for f, v in gone)}"
                                               if gone else ""))
    print(" | ".join(FACTORS) + " | stated | by design | n/a | failed")
    failures, t0 = 0, time.perf_counter()
    for cell in grid:
        with contextlib.redirect_stdout(io.StringIO()):
            adapter = demo(**settings_of(cell))
            results = sanity_checks(adapter)
        failed = [f"{r.name} ({r.value:.3g}{' at ' + r.setting if r.setting else ''})"
                  for r in results.values() if r.failed]
        failures += bool(failed)
        number = {name: i + 1 for i, name in enumerate(results)}
        design = ",".join(str(number[r.name]) for r in results.values() if r.by_design) or "-"
        na = ",".join(str(number[r.name]) for r in results.values() if r.na) or "-"
        print(" | ".join(str(cell[k]) for k in FACTORS) + f" | {'yes' if not adapter.objective_why else 'kind'} | "
              f"{design} | {na} | {'; '.join(failed) or '0'}", flush=True)
    print(f"{failures} of {len(grid)} cells with a failed check ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
