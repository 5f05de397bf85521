"""Before step 1: invariants a correct PPO/GRPO trainer satisfies, checked through its own code.

- ``adapter``     the probe points a trainer exposes (:class:`TrainerAdapter`) and their loading
- ``invariants``  the chapter's nine checks, their registry and :func:`sanity_checks`
- ``beyond``      checks 10-12: the clip, the KL term's gradient, group-local advantages
- ``capabilities`` what an adapter's trainer can be asked; n/a and by-design results follow from it
- ``runs``        opt-in run-level checks (short training runs)
- ``results``     one result per check, n/a with its reason, merged over probe seeds
- ``thresholds``  pass/fail limits (fp32 defaults, a bf16 starting point)
"""

from rlbisect.check.adapter import (DEFAULT_ADAPTER, AdapterError, Prepared, TrainerAdapter, Truth,
                                    load_adapter)
from rlbisect.check.capabilities import Capabilities
from rlbisect.check.invariants import (INVARIANTS, CheckResult, check_matrix, check_seeds,
                                       register_invariant, sanity_checks)
from rlbisect.check.thresholds import Thresholds

__all__ = ["DEFAULT_ADAPTER", "INVARIANTS", "AdapterError", "Capabilities", "CheckResult", "Prepared", "Thresholds",
           "TrainerAdapter", "Truth", "check_matrix", "check_seeds", "load_adapter", "register_invariant",
           "sanity_checks"]
