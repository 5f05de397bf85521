"""Mutation score: for every fault switch of TinyAgent, which layer of rlbisect catches it.

* default check  `rlbisect check --bug FAULT` exactly as a user runs it: default options (probe
                 seed 1, the step-0 checks at every declared setting, the run-level checks);
                 the checks that fail. This is the column the acceptance figure is read from.
* at setting     the same checks at the setting the fault needs to bite (`faults.NEEDS`, config
                 fields only), on probe seeds 1, 2, 3: shown only where the default misses.
* detector       a 16-step run at that setting (`rlbisect train`, its watching hook): the spike
                 detectors that fire.
* short run      3 seeds of 8 steps against healthy runs at that setting (`rlbisect compare`,
                 the dashboard judgement): the metrics that moved beyond the seed spread.

Healthy code gets the same at every setting used: any hit there is a false alarm.

Usage: python benchmarks/bench_fault_catalogue.py [--faults a,b] [--check-only] [--markdown]
"""

from __future__ import annotations

import argparse
import statistics
import time

from reference_trainer.adapter import make_adapter
from reference_trainer.config import EnvConfig, RLConfig, SamplerConfig, UpdateConfig
from reference_trainer.faults import BUGS, CHAPTER, NEEDS
from reference_trainer.train import run
from rlbisect.runs.stats import Rule
from rlbisect.check.invariants import check_seeds
from rlbisect.runs.judge import dashboard, scores
from rlbisect.steps.hook import SnapshotHook
from rlbisect.tinyagent.train import detector_config

SETTING_FIELDS = {*EnvConfig.model_fields, *SamplerConfig.model_fields, *UpdateConfig.model_fields}


def setting(fault: str | None) -> dict:
    return {k: v for k, v in NEEDS.get(fault, {}).items() if k in SETTING_FIELDS}


def config(seed: int, settings: dict) -> RLConfig:
    sampler = {k: v for k, v in settings.items() if k in SamplerConfig.model_fields}
    update = {k: v for k, v in settings.items() if k in UpdateConfig.model_fields}
    env = {k: v for k, v in settings.items() if k in EnvConfig.model_fields}
    return RLConfig(seed=seed, env=EnvConfig(**env), sampler=SamplerConfig(**sampler), update=UpdateConfig(**update))


def checks(fault: str | None, settings: dict, seeds: tuple[int, ...] = (1, 2, 3)) -> list[str]:
    """The failing checks; with no settings and seeds (1,), `rlbisect check --bug FAULT`'s defaults."""
    kl = settings.get("kl_coef", 0.1)
    opts = {k: v for k, v in settings.items() if k != "kl_coef"}   # the trainer's settings reach the checks
    try:
        res = check_seeds(lambda s: make_adapter(seed=s, bug=fault, kl_coef=kl, **opts), list(seeds), runs=True)
    except Exception as e:   # noqa: BLE001 - the code under test raising under the checks: caught (bad)
        return [f"raised under the checks ({type(e).__name__})"]
    return [name for name, r in res.items() if r.failed]


def default_check(fault: str | None) -> list[str]:
    return checks(fault, {}, (1,))


def detectors(fault: str | None, settings: dict) -> list[str]:
    cfg = config(0, settings)
    # a watching hook, as `rlbisect train` arms: the rows' detectors plus the frozen reference's fingerprint
    hook = SnapshotHook(None, detectors=detector_config(cfg))
    try:
        run(cfg, 16, fault, eval_every=8, hook=hook)
    except Exception as e:   # noqa: BLE001 - a step that raises is what the hook saves
        return [f"raised ({type(e).__name__})"]
    return sorted({h.detector for h in hook.hits})


_healthy: dict[str, dict] = {}


def short_run(fault: str | None, settings: dict) -> list[str]:
    key = repr(sorted(settings.items()))
    if key not in _healthy:
        runs = {s: run(config(s, settings), 8, None, eval_every=8) for s in range(3)}
        _healthy[key] = scores(runs, dashboard(runs.values()), 4)
    try:
        runs = {s: run(config(s, settings), 8, fault, eval_every=8) for s in range(3)}
    except Exception as e:   # noqa: BLE001
        return [f"raised ({type(e).__name__})"]
    got = scores(runs, dashboard(runs.values()), 4)
    good = {m: v for m, v in _healthy[key].items() if all(x == x for x in v)}
    d = Rule(k0=3, max_seeds=3).judge(good, got)
    nonfinite = [m for m, v in got.items() if m in good and not all(x == x and abs(x) != float("inf") for x in v)]
    return nonfinite or [t.metric for t in d.deciding]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--faults", default=None)
    p.add_argument("--check-only", action="store_true", help="the default check column alone (about 3 s a fault)")
    p.add_argument("--markdown", action="store_true")
    a = p.parse_args()
    faults = a.faults.split(",") if a.faults else [None, *BUGS]
    rows, t0 = [], time.perf_counter()
    for fault in faults:
        s, t = setting(fault), time.perf_counter()
        default = default_check(fault)
        at_setting = checks(fault, s) if s and not default and not a.check_only else []
        later = ([], []) if a.check_only else (detectors(fault, s), short_run(fault, s))
        row = (fault or "healthy", s, default, at_setting, *later)
        rows.append(row)
        print(f"{row[0]:<26} default check: {', '.join(default) or '-'}"
              + ("" if a.check_only else f" | at {s or 'default'}: {', '.join(at_setting) or '-'} | detector: "
                 f"{', '.join(row[4]) or '-'} | short run: {', '.join(row[5][:4]) or '-'}")
              + f"  ({time.perf_counter() - t:.1f}s)", flush=True)
    bugs = [r for r in rows if r[0] != "healthy"]
    if bugs:
        by_default = statistics.fmean([1.0 if r[2] else 0.0 for r in bugs])
        missed = [r[0] for r in bugs if not r[2]]
        print(f"\n{by_default:.0%} of {len(bugs)} faults caught by the default `rlbisect check` alone"
              f"{'; missed: ' + ', '.join(missed) if missed else ''}")
        if not a.check_only:
            print(f"{sum(1 for r in bugs if any(r[2:])):d} of {len(bugs)} caught by some layer")
    healthy = [r for r in rows if r[0] == "healthy"]
    if healthy:
        print(f"healthy code: {'false alarm: ' + ', '.join(sum(healthy[0][2:], [])) if any(healthy[0][2:]) else 'no alarm'}")
    print(f"{time.perf_counter() - t0:.0f}s")
    if a.markdown:
        print("\n| fault | chapter | default check | setting it needs | at that setting | detector | short run |"
              "\n|---|---|---|---|---|---|---|")
        for name, s, c, cs, d, sr in rows:
            print(f"| `{name}` | {'yes' if name in CHAPTER else ''} | {', '.join(c) or '-'} "
                  f"| {', '.join(f'{k}={v}' for k, v in s.items())} | {', '.join(cs) or '-'} "
                  f"| {', '.join(d) or '-'} | {', '.join(sr[:3]) or '-'} |")


if __name__ == "__main__":
    main()
