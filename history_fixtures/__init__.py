"""Simulated git histories of TinyAgent in which one real commit introduces a fault."""

from .build import History, build_history, load_history
from .edits import BENIGN, FAULTS, INVARIANT_FAULTS

__all__ = ["History", "build_history", "load_history", "BENIGN", "FAULTS", "INVARIANT_FAULTS"]
