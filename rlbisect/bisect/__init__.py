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

# name -> module: imported on first use, so `rlbisect --help` and a cached re-run do not pay
# for numpy, GitPython and every predicate
_EXPORTS = {"bisect": "driver", "make_strategy": "strategies", "BisectOptions": "options",
            "BisectResult": "report", "ProbeRecord": "report", "Progress": "report",
            "Predicate": "predicates", "PredicateError": "predicates", "Probe": "predicates",
            "known_predicates": "predicates", "make_predicate": "predicates",
            "register_predicate": "predicates"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlbisect.bisect' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rlbisect.bisect.{_EXPORTS[name]}"), name)
