"""TinyAgent, the embedded reference trainer, seen from the toolkit: its faults, its starting policy.

The package is the only part of rlbisect that imports ``reference_trainer`` (``demo`` the only one
that imports ``history_fixtures``), always lazily: the toolkit works on any trainer through an
adapter; TinyAgent is where it is demonstrated and tested.

- ``train``   ``rlbisect train``: a run with the snapshot hook armed, one row per step
- ``replay``  the replayer of TinyAgent snapshots (``rlbisect replay step.pt``)
- ``demo``    ``rlbisect demo``: a simulated history with one faulty commit, bisected
"""

from __future__ import annotations

from typing import Callable


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
