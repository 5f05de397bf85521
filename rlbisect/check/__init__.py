"""Invariants a correct PPO/GRPO trainer satisfies, checked through its own code.

- ``adapter``     the probe points a trainer exposes (:class:`TrainerAdapter`, :class:`Offers`),
                  the registered adapters and their loading
- ``invariants``  checks 1-9, the :data:`INVARIANTS` registry and :func:`sanity_checks`
- ``context``     the probe batch and trainer quantities the checks share; a check at every setting
- ``beyond``      checks 10-16: the clip, the KL term's gradient, group-local advantages, ...
- ``spec``        the objective, schedule and run a trainer declares, and their independent values
- ``objective``   checks 17-20: advantages, loss and reference log-probs against the declared objective
- ``environment`` checks 21-23: the environment's contract
- ``schedule``    check 24: the learning rates the trainer's own scheduler sets, every probed setting
- ``capabilities`` what an adapter's trainer can be asked; n/a and by-design results follow from it
- ``observe``     the tap a trainer's loop, loss and optimizer are watched through (:class:`Recorder`)
- ``run_level``   run-level checks: short runs of the trainer's own loop, on by default
- ``loop``        the run-level identities, judged from what the recorder saw
- ``results``     one result per check, n/a with its reason, merged over probe seeds
- ``thresholds``  pass/fail limits (fp32 defaults, a bf16 starting point)
"""

from rlbisect.check.adapter import (ADAPTERS, DEFAULT_ADAPTER, AdapterBase, AdapterError, Offers, Prepared,
                                    TrainerAdapter, Truth, load_adapter)
from rlbisect.check.capabilities import Capabilities
from rlbisect.check.invariants import INVARIANTS, CheckResult, check_matrix, check_seeds, sanity_checks
from rlbisect.check.thresholds import Thresholds

__all__ = ["ADAPTERS", "DEFAULT_ADAPTER", "INVARIANTS", "AdapterBase", "AdapterError", "Capabilities", "CheckResult", "Offers",
           "Prepared", "Thresholds", "TrainerAdapter", "Truth", "check_matrix", "check_seeds", "load_adapter",
           "sanity_checks"]
