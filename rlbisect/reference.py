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


def make_hook(snapshot_dir, every: int | None, cfg, bug: str | None):
    """The hook `rlbisect train --snapshot-dir` arms: config that `replay_reference` can rebuild from,
    the post-update weights (1/4 of a small file), and room for every snapshot of a short run."""
    from rlbisect.hook import SnapshotHook
    return SnapshotHook(snapshot_dir, every=every, keep_last=KEEP, max_snapshots=KEEP, keep_post_update=True,
                        config={"trainer": "reference_trainer", "bug": bug, "rl": cfg.model_dump()})


KEEP = 20  # snapshots `rlbisect train` keeps (about 3 MB each)


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
    hook = None if snapshot_dir is None else make_hook(snapshot_dir, snapshot_every, cfg, bug)
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
        print(f"{len(hook.kept())} snapshot(s) in {snapshot_dir}")
    return 0


def replay_reference(snap, bug: str | None = None):
    """Re-run a reference-trainer snapshot's update with the importable `reference_trainer`.

    Mirrors `reference_trainer.train.train` around `rl_update`: the policy in eval mode, Adam, the
    "train" generator, the recorded thread count. The KL reference is the one the snapshot carries
    (the base policy the run started from); a snapshot without it (recorded before references were
    stored) falls back to the cached base policy, and says so. `bug`: None replays with the recorded
    fault switch, "none" with no fault, a name with that fault.
    """
    import torch

    from rlbisect.capture import clone, diff_norm, state_digest
    from rlbisect.replay import Replayed, ReplayError, UpdateRaised, restore_model, restore_optimizer, restore_rng
    try:
        from reference_trainer.config import RLConfig
        from reference_trainer.faults import check_bug
        from reference_trainer.policy import Policy
        from reference_trainer.tasks import make_tasks
        from reference_trainer.tokenizer import build_tokenizer
        from reference_trainer.update import make_ref, rl_update
    except Exception as e:  # noqa: BLE001 - code at another commit may not import at all
        raise ReplayError(f"cannot import the reference trainer: {type(e).__name__}: {e}") from None
    import reference_trainer
    notes = [f"trainer code: {Path(reference_trainer.__file__).parent}"]
    try:
        cfg = RLConfig.model_validate(snap.config.get("rl", {}))
        bug = snap.config.get("bug") if bug is None else None if bug == "none" else bug
        check_bug(bug)
        torch.set_num_threads(cfg.threads)
        if snap.num_threads != cfg.threads:
            notes.append(f"recorded with {snap.num_threads} threads, replayed with {cfg.threads}")
        tok = build_tokenizer(make_tasks("all"))
        model = Policy(len(tok)).eval()
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg.update.lr)
        restore_model(snap, model)
        restore_optimizer(snap, optimizer)
        ref = make_ref(model, cfg, bug)
        if ref is not None and ref is not model:
            if "ref" in snap.frozen:
                ref.load_state_dict(snap.frozen["ref"])
            else:
                from reference_trainer.base import make_base
                ref.load_state_dict(make_base(tok).state_dict())
                notes.append("KL reference rebuilt from the cached base policy: the snapshot carries none")
        gen = torch.Generator()
        restore_rng(snap, {"train": gen})  # last: nothing above may draw from the recorded streams
    except Exception as e:  # noqa: BLE001 - a config or state the code cannot take: cannot replay
        raise ReplayError(f"cannot rebuild the trainer state: {type(e).__name__}: {e}".splitlines()[0]) from None
    if bug != snap.config.get("bug"):
        notes.append(f"replayed with fault {bug or 'none'} (recorded with {snap.config.get('bug') or 'none'})")
    try:
        stats = rl_update(model, optimizer, clone(snap.batch), cfg, bug, ref, gen)
    except Exception as e:  # noqa: BLE001 - the trainer's own update failing is a finding
        raise UpdateRaised(f"{type(e).__name__}: {e}".splitlines()[0]) from None
    after = model.state_dict()
    return Replayed(stats=stats, post_update_sha256=state_digest(after), update_norm=diff_norm(after, snap.model),
                    update_diff_norm=None if snap.post_update is None else diff_norm(after, snap.post_update),
                    notes=notes)
