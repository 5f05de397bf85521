"""What the snapshot hook costs: a training step with and without the hook armed (but not firing),
side by side in one run, then one snapshot's size, save time and load time.

    python benchmarks/bench_hook.py [--steps 30]

Workloads: a toy MLP + Adam update; the reference trainer's `rl_update` on one fixed GRPO batch;
and its full step (sample 64 episodes, collate, update), as `reference_trainer.train` runs it.
The reference rows need `reference_trainer` and start from its behaviour-cloned policy (cached; built
on first use), with the hook `rlbisect train --snapshot-dir` arms (post-update weights kept), and
also time `rlbisect replay` of the saved step (load + rebuild + update + compare, in process).
Plain and hooked steps alternate and swap order every step, so drift in machine speed hits both
columns alike; figures are medians. One thread, as the reference trainer runs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

from rlbisect.steps.hook import SnapshotHook
from rlbisect.steps.replay import judge, replay_in_process
from rlbisect.steps.format import load_snapshot

Step = Callable[["SnapshotHook | None", int], dict]  # one training step, calling the hook if given


def toy() -> tuple[str, torch.nn.Module, Step, dict]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.Tanh(), torch.nn.Linear(256, 256),
                                torch.nn.Tanh(), torch.nn.Linear(256, 16))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    batch = {"x": torch.randn(1024, 128, generator=gen), "y": torch.randn(1024, 16, generator=gen)}

    def step(hook: SnapshotHook | None, i: int) -> dict:
        if hook:
            hook.before_update(i, model, opt, batch, {"train": gen})
        norms = []
        for rows in torch.randperm(1024, generator=gen).chunk(2):
            opt.zero_grad()
            (model(batch["x"][rows]) - batch["y"][rows]).pow(2).mean().backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e3)))
            opt.step()
        stats = {"loss": 0.0, "entropy": sum(norms)}
        if hook:
            hook.after_update(i, stats)
        return stats
    return "toy MLP update", model, step, {}


def reference() -> list[tuple[str, torch.nn.Module, Step, dict]]:
    try:
        from reference_trainer.base import make_base
        from reference_trainer.batch import collate
        from reference_trainer.config import RLConfig
        from reference_trainer.sampler import sample_groups
        from reference_trainer.tasks import make_tasks
        from reference_trainer.tokenizer import build_tokenizer
        from reference_trainer.update import rl_update
    except Exception as e:  # noqa: BLE001 - the trainer is optional here
        print(f"(reference trainer not available: {type(e).__name__}: {e})")
        return []
    # A small lr: dozens of updates on one fixed batch would otherwise diverge (and the detectors
    # would rightly fire); the cost of a step does not depend on it.
    cfg = RLConfig(update={"lr": 1e-4})
    torch.manual_seed(0)
    tasks, tok = make_tasks("train"), build_tokenizer(make_tasks("all"))
    model = make_base(tok)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.update.lr)
    gen = torch.Generator().manual_seed(0)

    def sample() -> dict:
        order = torch.randperm(len(tasks), generator=gen)[: cfg.sampler.tasks_per_step]
        picked = [tasks[i] for i in order.tolist()]
        return collate(sample_groups(model, picked, tok, cfg.env, cfg.sampler, gen), tok.pad_id,
                       cfg.sampler.group_size)
    fixed = sample()

    def update(hook: SnapshotHook | None, i: int, batch: dict, logged: tuple[str, ...]) -> dict:
        if hook:
            hook.before_update(i, model, opt, batch, {"train": gen})
        stats = {k: v for k, v in rl_update(model, opt, batch, cfg, None, None, gen).items() if k in logged}
        if hook:
            hook.after_update(i, stats)
        return stats
    # What `rlbisect train --snapshot-dir` arms (rlbisect.tinyagent.train.make_hook), so replay can run.
    armed = {"keep_post_update": True, "config": {"trainer": "reference_trainer", "bug": None,
                                                  "rl": cfg.model_dump()}}
    # These columns measure a hook that does not fire. On the fixed batch the sampler log-probs go
    # stale after its first update, so the consistency metrics would (rightly) fire: left out there.
    fixed_keys, fresh_keys = ("loss", "entropy", "grad_norm"), ("loss", "entropy", "grad_norm", "logp_gap")
    return [("reference rl_update", model, lambda hook, i: update(hook, i, fixed, fixed_keys), armed),
            ("reference full step", model, lambda hook, i: update(hook, i, sample(), fresh_keys), armed)]


class _Timed(SnapshotHook):
    """The hook, timing its own calls."""

    spent = 0.0

    def before_update(self, *a, **k):
        t0 = time.perf_counter()
        super().before_update(*a, **k)
        self.spent += time.perf_counter() - t0

    def after_update(self, *a, **k):
        t0 = time.perf_counter()
        hits = super().after_update(*a, **k)
        self.spent += time.perf_counter() - t0
        return hits


def measure(name: str, model: torch.nn.Module, step: Step, hook_kwargs: dict, steps: int, out_dir: Path) -> dict:
    hook = _Timed(out_dir / "armed", **hook_kwargs)  # detector hits only
    plain, hooked, in_hook = [], [], []
    for i in range(steps + 3):
        for armed in ((False, True) if i % 2 else (True, False)):
            hook.spent = 0.0
            t0 = time.perf_counter()
            step(hook if armed else None, i)
            dt = time.perf_counter() - t0
            if i >= 3:  # warm-up excluded
                (hooked if armed else plain).append(dt)
                if armed:
                    in_hook.append(hook.spent)

    saver = _Timed(out_dir / "saved", every=1, **hook_kwargs)  # one forced save of this workload
    step(saver, 0)
    save_s = saver.spent
    path = saver.saved[0]
    t0 = time.perf_counter()
    snap = load_snapshot(path)
    load_s = time.perf_counter() - t0
    replay_s = replayed = None
    if "trainer" in hook_kwargs.get("config", {}):
        t0 = time.perf_counter()
        replayed = judge(load_snapshot(path), replay_in_process(snap)).identical
        replay_s = time.perf_counter() - t0
    p, h = statistics.median(plain), statistics.median(hooked)
    return {"name": name, "params": sum(t.numel() for t in model.parameters()), "plain": p, "hooked": h,
            "in_hook": statistics.median(in_hook), "size": path.stat().st_size, "save": save_s,
            "load": load_s, "fired": len(hook.hits), "replay": replay_s, "identical": replayed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30, help="timed steps per column")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, step, hook_kwargs in [toy(), *reference()]:
            rows.append(measure(name, model, step, hook_kwargs, args.steps, Path(tmp) / name.replace(" ", "_")))
    print(f"torch {torch.__version__}, 1 thread, {args.steps} steps per column, medians\n")
    print(f"{'workload':<21}{'params':>9}{'step ms':>9}{'+hook ms':>10}{'overhead':>10}{'in hook':>9}"
          f"{'snap MB':>9}{'save ms':>9}{'load ms':>9}{'replay ms':>11}")
    for r in rows:
        print(f"{r['name']:<21}{r['params']:>9,}{r['plain'] * 1e3:>9.2f}{r['hooked'] * 1e3:>10.2f}"
              f"{(r['hooked'] - r['plain']) / r['plain']:>+10.1%}{r['in_hook'] / r['plain']:>9.1%}"
              f"{r['size'] / 1e6:>9.2f}{r['save'] * 1e3:>9.1f}{r['load'] * 1e3:>9.1f}"
              + (f"{r['replay'] * 1e3:>11.1f}" if r["replay"] is not None else f"{'-':>11}")
              + (f"   ({r['fired']} detector hits!)" if r["fired"] else "")
              + ("   (replay DIFFERS!)" if r["identical"] is False else ""))
    print("\noverhead = median hooked step / median plain step - 1 (includes cache effects);\n"
          "in hook = time inside before_update + after_update (clone state, run detectors) / plain step;\n"
          "save ms = time inside the hook on a step that writes its snapshot (capture, digest, fsync);\n"
          "replay ms = load + rebuild the trainer state + re-run the update + compare (bit-exact here).")


if __name__ == "__main__":
    main()
