"""verl's actor update (its engine, `ppo_loss`, core_algos), checked on CPU in one process.

    rlbisect check --adapter rlbisect.frameworks.verl:demo

Importing this package imports nothing of verl; each name below does, when first used.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the names' real types, for the type checker only
    from rlbisect.frameworks.verl.adapter import VerlAdapter as VerlAdapter, demo as demo
    from rlbisect.frameworks.verl._internals import require_verl as require_verl

_EXPORTS = {"VerlAdapter": "adapter", "demo": "adapter", "require_verl": "_internals"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlbisect.frameworks.verl' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rlbisect.frameworks.verl.{_EXPORTS[name]}"), name)
