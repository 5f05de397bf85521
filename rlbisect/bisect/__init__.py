"""Bisect a commit range with a real ``git bisect``, never touching the user's working copy.

Layout (algorithm apart from porcelain, as in git):

- ``search``      pure: candidates, weights, which commit(s) to probe next (no git, no I/O)
- ``stats``       pure: the seed-spread rule behind short-run verdicts
- ``bayes``       pure: the posterior over the culprit for a predicate that can lie (``--flaky``)
- ``diagnose``    pure: what moved between the first bad commit and its parent
- ``repo``        git through GitPython: the range, temporary worktrees, ``git bisect`` in them
- ``predicates``  what decides good/bad/skip; a registry so new kinds plug in by name
- ``cache``       results by tree hash + predicate in ``.git/rlbisect/cache.jsonl``
- ``runner``      orchestration with cleanup on every path (errors, timeouts, signals)
- ``flaky``, ``parallel``, ``executors``   the noisy-predicate loop; k-ary rounds on local or Ray workers
- ``invariant_probe``, ``shortrun``, ``replay_predicate``   the registered predicates besides a command
- ``report``      text, JSON, markdown and PNG; ``run_and_report`` is ``rlbisect run``
"""

from rlbisect.bisect.predicates import (CommandPredicate, Predicate, PredicateError, PredicateSpec,
                                        Probe, known_predicates, make_predicate,
                                        register_predicate, run_command)
from rlbisect.bisect import invariant_probe, replay_predicate, shortrun  # noqa: F401  (register predicates)
from rlbisect.bisect.repo import BisectInputError, RepoError
from rlbisect.bisect.runner import BisectInterrupted, BisectResult, ProbeRecord, run_bisect

__all__ = ["BisectInputError", "BisectInterrupted", "BisectResult", "CommandPredicate",
           "Predicate", "PredicateError", "PredicateSpec", "Probe", "ProbeRecord", "RepoError",
           "known_predicates", "make_predicate", "register_predicate", "run_bisect", "run_command"]
