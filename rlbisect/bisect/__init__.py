"""Bisect a commit range with a real ``git bisect``, never touching the user's repository.

Layout (algorithm apart from porcelain, as in git):

- pure, no git and no I/O: ``search`` (candidates, git's choice, k-ary picks), ``bayes`` (the
  posterior for a predicate that lies), ``stats`` (the seed-spread rule of short runs),
  ``diagnose`` (what moved between the culprit and its parent), ``strategies`` (what to probe
  next and when the evidence is enough)
- ``driver``: the one loop (git, cache, executor, interruption, cleanup); ``options``: its
  documented configuration; ``report``: the result as text, JSON and markdown
- ``predicates``: what decides good/bad/skip (command, invariants, short-run, replay), by name
- ``cache`` (verdicts by tree and predicate in ``.git/rlbisect/``), ``executors`` (local
  threads or Ray tasks)
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the names' real types, for the type checker only
    from rlbisect.bisect.driver import bisect as bisect
    from rlbisect.bisect.options import BisectOptions as BisectOptions
    from rlbisect.bisect.predicates import PREDICATES as PREDICATES, Predicate as Predicate
    from rlbisect.bisect.predicates import PredicateError as PredicateError, Probe as Probe
    from rlbisect.bisect.predicates import known_predicates as known_predicates
    from rlbisect.bisect.predicates import make_predicate as make_predicate
    from rlbisect.bisect.report import BisectResult as BisectResult, ProbeRecord as ProbeRecord
    from rlbisect.bisect.report import Progress as Progress
    from rlbisect.bisect.strategies import make_strategy as make_strategy

# name -> module: imported on first use, so `rlbisect --help` and a cached re-run do not pay
# for numpy and every predicate
_EXPORTS = {"bisect": "driver", "make_strategy": "strategies", "BisectOptions": "options",
            "BisectResult": "report", "ProbeRecord": "report", "Progress": "report",
            "Predicate": "predicates", "PredicateError": "predicates", "Probe": "predicates",
            "known_predicates": "predicates", "make_predicate": "predicates",
            "PREDICATES": "predicates"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlbisect.bisect' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rlbisect.bisect.{_EXPORTS[name]}"), name)
