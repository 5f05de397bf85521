"""Mutation score: for every fault switch of TinyAgent, which layer of rlbisect catches it.

For each fault, at the setting it needs to bite (`reference_trainer.faults.NEEDS`, config fields only):

* check      the invariants on probe seeds 1, 2, 3 plus the run-level checks (`rlbisect check
             --probe-seeds 1,2,3 --runs`): the checks that fail;
* detector   a 16-step run (`rlbisect train`, its watching hook): the spike detectors that fire;
* short run  3 seeds of 8 steps against healthy runs at the same setting (`rlbisect compare`,
             the dashboard judgement): the metrics that moved beyond the seed spread.

Healthy code gets the same three at every setting used: any hit there is a false alarm.

Usage: python benchmarks/bench_fault_catalogue.py [--faults a,b] [--markdown]
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


def checks(fault: str | None, settings: dict) -> list[str]:
    kl = settings.get("kl_coef", 0.1)
    opts = {k: v for k, v in settings.items() if k != "kl_coef"}   # the trainer's settings reach the checks
    try:
        res = check_seeds(lambda s: make_adapter(seed=s, bug=fault, kl_coef=kl, **opts), [1, 2, 3], runs=True)
    except Exception as e:   # noqa: BLE001 - the code under test raising under the checks: caught (bad)
        return [f"raised under the checks ({type(e).__name__})"]
    return [name for name, r in res.items() if not r.passed]


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
    p.add_argument("--markdown", action="store_true")
    a = p.parse_args()
    faults = a.faults.split(",") if a.faults else [None, *BUGS]
    rows, t0 = [], time.perf_counter()
    for fault in faults:
        s = setting(fault)
        t = time.perf_counter()
        row = (fault or "healthy", s, checks(fault, s), detectors(fault, s), short_run(fault, s))
        rows.append(row)
        print(f"{row[0]:<22} {str(s or ''):<36} check: {', '.join(row[2]) or '-'} | detector: "
              f"{', '.join(row[3]) or '-'} | short run: {', '.join(row[4][:4]) or '-'}  "
              f"({time.perf_counter() - t:.0f}s)", flush=True)
    caught = [r for r in rows if r[0] != "healthy" and (r[2] or r[3] or r[4])]
    print(f"\n{len(caught)} of {len(rows) - (faults[0] is None)} faults caught by some layer; "
          f"{statistics.fmean([1.0 if r[2] or r[3] else 0.0 for r in rows if r[0] != 'healthy']):.0%} "
          f"by a check or a detector; {time.perf_counter() - t0:.0f}s")
    if a.markdown:
        print("\n| fault | chapter | setting | check | detector | short run |\n|---|---|---|---|---|---|")
        for name, s, c, d, sr in rows:
            print(f"| `{name}` | {'yes' if name in CHAPTER else ''} | {', '.join(f'{k}={v}' for k, v in s.items())} "
                  f"| {', '.join(c) or '-'} | {', '.join(d) or '-'} | {', '.join(sr[:3]) or '-'} |")


if __name__ == "__main__":
    main()
