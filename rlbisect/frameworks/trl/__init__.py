"""TRL's GRPOTrainer: the shipped adapter, its tiny demo trainer and the snapshot callback.

    rlbisect check --adapter rlbisect.frameworks.trl:demo
    trainer.add_callback(SnapshotCallback(trainer, "snapshots/"))

Importing this package imports nothing of TRL; each name below does, when first used.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the names' real types, for the type checker only
    from rlbisect.frameworks.trl.adapter import GRPOAdapter as GRPOAdapter, demo as demo
    from rlbisect.frameworks.trl.adapter import require_tested_trl as require_tested_trl, require_trl as require_trl
    from rlbisect.frameworks.trl.callback import SnapshotCallback as SnapshotCallback, replay_step as replay_step

_EXPORTS = {"GRPOAdapter": "adapter", "demo": "adapter", "require_tested_trl": "adapter", "require_trl": "adapter",
            "SnapshotCallback": "callback", "replay_step": "callback"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlbisect.frameworks.trl' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rlbisect.frameworks.trl.{_EXPORTS[name]}"), name)
