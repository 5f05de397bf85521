"""``rlbisect train``: TinyAgent from its starting policy, one metric row per step."""

from __future__ import annotations

import typer

from rlbisect.cli.common import finite, folder_path, output_path
from rlbisect.errors import InputError

#: What torch's seeding takes (manual_seed). A seed outside it raised deep in the trainer: `check`
#: then reported every check FAILED, exit 1, which a bisect reads as a bad commit.
SEEDS = range(-2**63, 2**64)


def seed_in_range(seed: int, option: str) -> None:
    """Refuse a seed no torch generator can take, as bad input (exit 2), before any work."""
    if seed not in SEEDS:
        raise InputError(f"{option} {seed}: a seed must be from -2**63 to 2**64 - 1 (what torch's manual_seed takes)")


def train_cmd(
    steps: int = typer.Option(24, "--steps", min=1, help="RL steps (16 tasks x 8 episodes each)"),
    seed: int = typer.Option(0, "--seed", help="seed of the training stream"),
    eval_every: int = typer.Option(8, "--eval-every", min=1, help="held-out evaluation every N steps (and at the last)"),
    out: str = typer.Option(None, "--out", help="write one JSON row per step to this file"),
    bug: str = typer.Option(None, "--bug", help="inject one of TinyAgent's code faults by name, e.g. mask_shift (an unknown name lists them all)"),
    reward: str = typer.Option(None, "--reward",
                               help="hidden (honest) or public (gameable) verifier (default: the trainer's, hidden)"),
    lr: float = typer.Option(None, "--lr", help="Adam learning rate (default 6e-4)"),
    kl_coef: float = typer.Option(None, "--kl-coef", help="KL-to-reference weight (default 0: no reference)"),
    max_turns: int = typer.Option(None, "--max-turns", help="policy calls per episode (default 6)"),
    loss_mode: str = typer.Option(None, "--loss-mode", help="token_mean or seq_mean_token_mean"),
    temperature: float = typer.Option(None, "--temperature", help="sampler and trainer temperature (default 1)"),
    snapshot_dir: str = typer.Option(None, "--snapshot-dir", help="save replayable steps here when a detector fires"),
    snapshot_every: int = typer.Option(None, "--snapshot-every", min=1, help="also save every K steps"),
) -> None:
    """Train TinyAgent from its behaviour-cloned starting policy and log one metric row per step.

    Example: rlbisect train --steps 24 --seed 0 --eval-every 8 --out run.jsonl --bug mask_shift
    """
    from rlbisect.tinyagent import first_use_note
    from rlbisect.tinyagent.train import TrainSettings, step_line, train
    seed_in_range(seed, "--seed")
    finite(lr=lr, kl_coef=kl_coef, temperature=temperature)     # an infinite lr trains NaN, then the sampler raises
    if note := first_use_note():
        typer.echo(note, err=True)
    settings = TrainSettings(steps, seed, eval_every, bug, reward, lr, kl_coef, max_turns, loss_mode,
                             temperature, output_path(out, "--out"),
                             folder_path(snapshot_dir, "--snapshot-dir"), snapshot_every)
    def hit_line(hit) -> None:
        where = "saved" if snapshot_dir else "not saved: add --snapshot-dir DIR to keep it replayable"
        typer.echo(f"  detector {hit.detector} fired at step {hit.step}: {hit.message}; {where}")
    done = train(settings, on_row=lambda row: typer.echo(step_line(row)), on_hit=hit_line)
    if snapshot_dir is not None:
        typer.echo(f"{len(done.snapshots)} snapshot(s) in {snapshot_dir}")
