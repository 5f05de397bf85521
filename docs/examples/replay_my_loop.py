"""Replayable steps in your own PyTorch loop: the hook in the loop, and what `rlbisect replay` needs.

    python docs/examples/replay_my_loop.py /tmp/snaps        # trains 5 steps, saves every step
    rlbisect replay /tmp/snaps/step-000003.pt --adapter docs/examples/replay_my_loop.py:adapter

`replay --adapter` (and `promote --adapter`) need only a factory returning an object with
`replay(snapshot, bug) -> Replayed`: none of the check probe points. The replayer rebuilds what the
loop had before the update, puts the saved state back, runs the same update function, and reports
what it returned and a digest of the weights after it.
"""

from __future__ import annotations

import sys

import torch

from rlbisect.steps import Replayed, SnapshotHook
from rlbisect.steps.capture import copy_tensors, diff_norm, optimizer_digest, state_digest
from rlbisect.steps.replay import restore

LR = 1e-2


def build() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.set_num_threads(1)              # the same thread count recorded and replayed
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    return model, torch.optim.Adam(model.parameters(), lr=LR)


def update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict) -> dict:
    """One optimizer step: the code a replay must run again, unchanged."""
    optimizer.zero_grad()
    loss = ((model(batch["x"]) - batch["y"]) ** 2).mean()
    loss.backward()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    optimizer.step()
    return {"loss": loss.item(), "grad_norm": grad_norm}


def train(folder: str, steps: int = 5) -> list:
    model, optimizer = build()
    data = torch.Generator().manual_seed(0)
    # the weights after each update too: a replay within --tolerance measures how far it lands
    hook = SnapshotHook(folder, every=1, config={"trainer": "my_loop"}, keep_post_update=True)
    for step in range(steps):
        batch = {"x": torch.randn(8, 4, generator=data), "y": torch.randn(8, 1, generator=data)}
        hook.before_update(step, model, optimizer, batch)
        hook.after_update(step, update(model, optimizer, batch))
    return hook.kept()   # the newest few: periodic files rotate (keep_last)


class Replayer:
    def replay(self, snapshot, bug=None) -> Replayed:
        model, optimizer = build()
        restore(snapshot, model, optimizer)
        stats = update(model, optimizer, copy_tensors(snapshot.batch))
        after = model.state_dict()
        return Replayed(stats, state_digest(after), update_norm=diff_norm(after, snapshot.model),
                        update_diff_norm=None if snapshot.post_update is None else diff_norm(after, snapshot.post_update),
                        post_optimizer_sha256=optimizer_digest(optimizer))


def adapter() -> Replayer:
    return Replayer()


if __name__ == "__main__":
    for path in train(sys.argv[1]):
        print(path)
