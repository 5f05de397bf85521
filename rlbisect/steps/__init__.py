"""Replayable steps: a hook saves a step when an RL detector fires; replay reproduces it exactly.

- ``hook``, ``spikes``      the snapshot hook for any training loop, and the detectors it feeds
- ``capture``, ``format``, ``trees``   what a step is made of, and its safe file format
- ``restore``, ``replay``, ``at``   state back into live objects; replay here (bit for bit) or with another commit's code
- ``describe``, ``promote`` what ``rlbisect inspect`` shows; a found regression as a pytest file
"""

from rlbisect.steps.format import Snapshot, SnapshotError, load_snapshot, save_snapshot
from rlbisect.steps.hook import SnapshotHook
from rlbisect.steps.replay import (REPLAYERS, Replayed, ReplayError, UpdateRaised, judge,
                                   replay_in_process, restore)
from rlbisect.steps.spikes import DetectorSet, Hit, SpikeConfig, default_detectors

__all__ = ["REPLAYERS", "DetectorSet", "Hit", "Replayed", "ReplayError", "Snapshot", "SnapshotError",
           "SnapshotHook", "SpikeConfig", "UpdateRaised", "default_detectors", "judge",
           "load_snapshot", "replay_in_process", "restore", "save_snapshot"]
