"""``rlbisect train``: TinyAgent from its starting policy, one metric row per step, detectors armed.

    rows = train(TrainSettings(steps=24, bug="mask_shift"), on_row=print).rows
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rlbisect.runs.read import json_line

#: Snapshots ``rlbisect train`` keeps (about 3 MB each).
KEEP = 20


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


def make_hook(snapshot_dir, every: int | None, cfg, bug: str | None, steps: int | None = None):
    """The hook ``rlbisect train`` arms (watching only, without ``--snapshot-dir``): a config ``replay_reference`` can rebuild
    from (with the run's length in optimizer steps, which the learning-rate schedule reads), the
    post-update weights, and room for every snapshot of a short run."""
    from rlbisect.steps.hook import SnapshotHook
    u = cfg.update
    length = {} if steps is None else {"optimizer_steps": steps * u.epochs * u.minibatches}
    return SnapshotHook(snapshot_dir, every=every, keep_last=KEEP, max_snapshots=KEEP,
                        keep_post_update=True, detectors=detector_config(cfg),
                        config={"trainer": "reference_trainer", "bug": bug, "rl": cfg.model_dump(), **length})


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
    hook = make_hook(s.snapshot_dir, s.snapshot_every, cfg, s.bug, s.steps)
    result = TrainResult()
    sink = open(s.out, "w") if s.out else None

    def row_done(row: dict) -> None:
        if sink:
            sink.write(json_line(row) + "\n")
            sink.flush()
        result.rows.append(row)
        new = hook.hits[len(result.hits):]
        result.hits += new
        if on_row:
            on_row(row)
        if on_hit:
            for hit in new:
                on_hit(hit)
    try:
        run(cfg, s.steps, s.bug, s.eval_every, row_done, hook)
    except Exception as e:
        raise failed(e, hook.step_failed(e), result, s.out) from e
    finally:
        if sink:
            sink.close()
        result.snapshots = hook.kept()
    return result


def failed(error: Exception, saved: Path | None, so_far: TrainResult, out: Path | None) -> Exception:
    """A trainer's exception as one line a user can act on (a diverged run ends in the sampler's
    "probability tensor contains nan", whose cause is the detectors' first hit, steps earlier)."""
    from rlbisect.errors import TrainingFailed, describe
    words = [f"the trainer raised at step {len(so_far.rows)}: {describe(error)}"]
    if first := next((h for h in so_far.hits if h.detector != "raised"), None):
        words.append(f"first detector hit: {first.detector} at step {first.step} ({first.message})")
    if saved is not None:
        words.append(f"the failing step's state is saved in {saved} (rlbisect replay it)")
    if out is not None:
        words.append(f"the rows before it are in {out}")
    return TrainingFailed("; ".join(words))
