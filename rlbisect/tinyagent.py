"""Glue between the toolkit and the embedded reference trainer, TinyAgent (``reference_trainer``).

This is the only rlbisect module that imports ``reference_trainer`` (``demo.py`` is the only one
that imports ``history_fixtures``), and it does so lazily: the toolkit works on any trainer
through an adapter; TinyAgent is where it is demonstrated and tested.

    rows = train(TrainSettings(steps=24, bug="mask_shift"), on_row=print)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

#: Snapshots ``rlbisect train`` keeps (about 3 MB each).
KEEP = 20


def fault_names() -> list[str]:
    """TinyAgent's fault switches (``--bug``); ``reference_trainer.faults`` imports nothing heavy."""
    from reference_trainer.faults import BUGS
    return list(BUGS)


def first_use_note() -> str | None:
    """What to tell a user before TinyAgent's starting policy is built on this machine."""
    from reference_trainer.policy_cache import cached_path
    if cached_path().exists():
        return None
    return ("first use on this machine: building TinyAgent's starting policy by behaviour cloning "
            f"(30-60 s on 2 cores, once; cached in {cached_path().parent})")


def prepare_base(say: Callable[[str], None]) -> None:
    """Build the starting policy now, saying so, if it is not cached yet (one build instead of
    one per probe, and the wait explained)."""
    if (note := first_use_note()) is None:
        return
    import time

    import torch

    from reference_trainer.base import make_base
    say(note)
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    make_base()
    say(f"built in {time.perf_counter() - t0:.0f} s")


@dataclass
class TrainSettings:
    """What ``rlbisect train`` runs: the CLI's knobs (None keeps the trainer's default)."""

    steps: int = 24
    seed: int = 0
    eval_every: int = 8
    bug: str | None = None
    reward: str | None = None
    lr: float | None = None
    kl_coef: float | None = None
    max_turns: int | None = None
    loss_mode: str | None = None
    temperature: float | None = None
    out: Path | None = None                 # one JSON row per step
    snapshot_dir: Path | None = None        # save replayable steps when a detector fires
    snapshot_every: int | None = None       # and every K steps


@dataclass
class TrainResult:
    rows: list[dict] = field(default_factory=list)
    snapshots: list[Path] = field(default_factory=list)
    hits: list = field(default_factory=list)   # every detector hit of the run


def step_line(row: dict) -> str:
    """The compact per-step line: outcome, behaviour, optimizer and consistency at a glance."""
    parts = [f"step {row['step']:3d}", f"reward {row['reward']:.3f}"]
    if "eval_pass" in row:
        parts.append(f"held-out {row['eval_pass']:.3f}")
    for key in ("reads", "malformed", "entropy", "approx_kl", "clip_frac", "grad_norm", "logp_gap",
                "kl_ref"):
        if key in row:
            parts.append(f"{key} {row[key]:.3g}")
    return " | ".join(parts)


def detector_config(cfg):
    """The spike detectors for this run's shape: optimizer steps per sampled batch."""
    from rlbisect.steps.spikes import SpikeConfig
    return SpikeConfig.for_trainer(cfg.update.epochs * cfg.update.minibatches)


def make_hook(snapshot_dir, every: int | None, cfg, bug: str | None):
    """The hook ``rlbisect train`` arms (watching only, without ``--snapshot-dir``): a config ``replay_reference`` can rebuild
    from, the post-update weights, and room for every snapshot of a short run."""
    from rlbisect.steps.hook import SnapshotHook
    return SnapshotHook(snapshot_dir, every=every, keep_last=KEEP, max_snapshots=KEEP,
                        keep_post_update=True, detectors=detector_config(cfg),
                        config={"trainer": "reference_trainer", "bug": bug, "rl": cfg.model_dump()})


def train(s: TrainSettings, on_row: Callable[[dict], None] | None = None,
          on_hit: Callable | None = None) -> TrainResult:
    """Train TinyAgent from its starting policy; rows go to ``s.out`` and ``on_row`` as they come,
    each spike detector hit to ``on_hit`` (saved as a replayable step with ``s.snapshot_dir``).
    Raises :class:`~rlbisect.errors.InputError` for settings the trainer refuses."""
    from pydantic import ValidationError

    from reference_trainer.config import make_config
    from reference_trainer.faults import check_bug
    from reference_trainer.train import run
    from rlbisect.errors import InputError
    try:
        check_bug(s.bug)
        # no reward argument at all when unset: a trainer's make_config may not take None
        reward = {} if s.reward is None else {"reward": s.reward}
        cfg = make_config(seed=s.seed, **reward, lr=s.lr, kl_coef=s.kl_coef,
                          max_turns=s.max_turns, loss_mode=s.loss_mode, temperature=s.temperature)
    except ValidationError as e:
        first = e.errors()[0]
        raise InputError(f"--{str(first['loc'][-1]).replace('_', '-')}: {first['msg']}") from None
    except ValueError as e:
        raise InputError(str(e)) from None
    if s.snapshot_every is not None and s.snapshot_dir is None:
        raise InputError("--snapshot-every needs --snapshot-dir")
    # without --snapshot-dir the hook still watches (and says so): only saving needs a directory
    hook = make_hook(s.snapshot_dir, s.snapshot_every, cfg, s.bug)
    result = TrainResult()
    sink = open(s.out, "w") if s.out else None

    def row_done(row: dict) -> None:
        if sink:
            sink.write(json.dumps(row) + "\n")
            sink.flush()
        result.rows.append(row)
        new = hook.hits[len(result.hits):]
        result.hits += new
        if on_row:
            on_row(row)
        for hit in new if on_hit else ():
            on_hit(hit)
    try:
        run(cfg, s.steps, s.bug, s.eval_every, row_done, hook)
    except Exception as e:
        if (saved := hook.step_failed(e)) is not None:
            e.add_note(f"rlbisect: the failing step's state is saved in {saved} "
                       "(rlbisect replay it)")
        raise
    finally:
        if sink:
            sink.close()
        result.snapshots = hook.kept()
    return result


def replay_reference(snap, bug: str | None = None):
    """Re-run a TinyAgent snapshot's update with the importable ``reference_trainer``.

    Mirrors ``reference_trainer.train.train`` around ``rl_update``: the policy in eval mode, Adam,
    the "train" generator, the recorded thread count. The KL reference is the one the snapshot
    carries (the base policy the run started from); a snapshot without it falls back to the cached
    base policy, and says so. ``bug``: None replays with the recorded fault switch, "none" with no
    fault, a name with that fault.
    """
    import torch

    from rlbisect.errors import describe
    from rlbisect.steps.capture import copy_tensors, diff_norm, state_digest
    from rlbisect.steps.replay import (Replayed, ReplayError, UpdateRaised, restore_model,
                                       restore_optimizer, restore_rng)
    try:
        import reference_trainer
        from reference_trainer.config import RLConfig
        from reference_trainer.faults import check_bug
        from reference_trainer.policy import Policy
        from reference_trainer.tasks import make_tasks
        from reference_trainer.tokenizer import build_tokenizer
        from reference_trainer.update import make_ref, rl_update
    except Exception as e:  # noqa: BLE001 - code at another commit may not import at all
        raise ReplayError(f"cannot import the reference trainer: {type(e).__name__}: {e}") from None
    notes = [f"trainer code: {Path(reference_trainer.__file__).parent}"]
    try:
        cfg = RLConfig.model_validate(snap.config.get("rl", {}))
        bug = snap.config.get("bug") if bug is None else None if bug == "none" else bug
        check_bug(bug)
        # a file's word is not enough to start 100,000 threads: at most this machine's cores
        threads = max(1, min(cfg.threads, os.cpu_count() or 1))
        torch.set_num_threads(threads)
        if snap.num_threads != threads:
            notes.append(f"recorded with {snap.num_threads} threads, replayed with {threads}")
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
                notes.append("KL reference rebuilt from the cached base policy: the snapshot "
                             "carries none")
        gen = torch.Generator()
        restore_rng(snap, {"train": gen})   # last: nothing above may draw from the recorded streams
    except Exception as e:  # noqa: BLE001 - a config or state the code cannot take: cannot replay
        raise ReplayError(f"cannot rebuild the trainer state: {describe(e)}") from None
    if bug != snap.config.get("bug"):
        notes.append(f"replayed with fault {bug or 'none'} (recorded with "
                     f"{snap.config.get('bug') or 'none'})")
    try:
        stats = rl_update(model, optimizer, copy_tensors(snap.batch), cfg, bug, ref, gen)
    except Exception as e:  # noqa: BLE001 - the trainer's own update failing is a finding
        raise UpdateRaised(f"{type(e).__name__}: {e}".splitlines()[0]) from None
    after = model.state_dict()
    return Replayed(stats=stats, post_update_sha256=state_digest(after),
                    update_norm=diff_norm(after, snap.model),
                    update_diff_norm=None if snap.post_update is None else diff_norm(after, snap.post_update),
                    notes=notes)
