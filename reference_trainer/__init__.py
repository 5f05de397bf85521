"""TinyAgent: a small, complete, deterministic coding-agent RL stack (the embedded default).

Pipeline: tasks -> tokenizer -> env -> policy -> sampler -> batch -> losses -> update -> train,
with `base` (the behaviour-cloned starting policy), `config` (one model per stage) and `faults`
(the chapter's code faults, one switch each).
"""

from .config import RLConfig, make_config
from .faults import BUGS

__all__ = ["RLConfig", "make_config", "BUGS"]
