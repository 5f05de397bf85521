"""Glue between the toolkit and the embedded reference trainer (TinyAgent).

This is the one rlbisect module besides the demo that imports `reference_trainer`, and it does so
lazily: the toolkit itself works on any trainer through an adapter.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def step_line(row: dict) -> str:
    """The compact per-step line: outcome, behaviour, optimizer and consistency at a glance."""
    parts = [f"step {row['step']:3d}", f"reward {row['reward']:.3f}"]
    if "eval_pass" in row:
        parts.append(f"held-out {row['eval_pass']:.3f}")
    for key in ("reads", "malformed", "entropy", "approx_kl", "clip_frac", "grad_norm", "logp_gap", "kl_ref"):
        if key in row:
            parts.append(f"{key} {_fmt(row[key])}")
    return " | ".join(parts)


def train_main(*, steps: int, seed: int, eval_every: int, out: str | None, bug: str | None, reward: str,
               lr: float | None, kl_coef: float | None, max_turns: int | None, loss_mode: str | None,
               temperature: float | None, snapshot_dir: str | None, snapshot_every: int | None) -> int:
    """`rlbisect train`: validate, run, stream rows to stdout and `out`. Returns the exit code."""
    from pydantic import ValidationError

    from reference_trainer.config import make_config
    from reference_trainer.faults import check_bug
    from reference_trainer.train import run

    err = Console(stderr=True)

    def fail(msg: str) -> int:
        print(f"rlbisect: error: {msg}", file=sys.stderr)
        return 2
    try:
        check_bug(bug)
        cfg = make_config(seed=seed, reward=reward, lr=lr, kl_coef=kl_coef, max_turns=max_turns,
                          loss_mode=loss_mode, temperature=temperature)
    except ValidationError as e:
        first = e.errors()[0]
        return fail(f"--{str(first['loc'][-1]).replace('_', '-')}: {first['msg']}")
    except ValueError as e:
        return fail(str(e))
    if snapshot_every is not None and snapshot_dir is None:
        return fail("--snapshot-every needs --snapshot-dir")
    if out is not None and not Path(out).parent.is_dir():
        return fail(f"--out: directory {Path(out).parent} does not exist")
    hook = None
    if snapshot_dir is not None:
        from rlbisect.hook import SnapshotHook
        hook = SnapshotHook(snapshot_dir, every=snapshot_every,
                            config={"trainer": "reference_trainer", "bug": bug, "rl": cfg.model_dump()})
    sink = open(out, "w") if out else None
    progress = Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err, transient=True, disable=not err.is_terminal)

    def on_row(row: dict) -> None:
        if sink:
            sink.write(json.dumps(row) + "\n")
            sink.flush()
        print(step_line(row), flush=True)
        progress.advance(task)

    try:
        with progress:
            task = progress.add_task("train", total=steps)
            run(cfg, steps, bug, eval_every, on_row, hook)
    finally:
        if sink:
            sink.close()
    if hook is not None:
        saved = hook.kept() if hasattr(hook, "kept") else []
        print(f"{len(saved)} snapshot(s) in {snapshot_dir}")
    return 0
