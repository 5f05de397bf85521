"""Old and new: a bisect for the first commit where the predicate starts *passing* (a fix).

``rlbisect run OLD..NEW --find-fix`` (or ``--terms OLD,NEW`` to name the two states, as ``git
bisect start --term-old/--term-new`` does) reads the predicate the other way round: failing is
the old state, passing the new one. The search itself is unchanged: the predicate's verdicts are
inverted (:class:`FixSearch`: good <-> bad, skip and abort as they are), git's own bisection
marks old as good and new as bad, and the answer is the first new commit. The evidence rules are
the same, both ends confirmed: the predicate must fail at OLD and pass at NEW. Unlike ``git bisect
run``, which marks exit 0 as the old state whatever it is called, here exit 0 (passing) is new.

A predicate that judges a commit against GOOD (short-run: "moved beyond GOOD's seed spread")
cannot be inverted this way: it is refused. With ``--flaky`` and ``--metric`` it need not be: the
measured search reads numbers, not verdicts, and looks for the move opposite the bug's direction.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from rlbisect.bisect.predicates import BasePredicate, Predicate, Probe
from rlbisect.errors import InputError, Verdict

#: ``--find-fix``'s words: "<sha> is the first fixed commit".
FIX_TERMS = ("broken", "fixed")
_FLIP = {Verdict.GOOD: Verdict.BAD, Verdict.BAD: Verdict.GOOD}


def parse_terms(text: str | None, find_fix: bool) -> tuple[str, str] | None:
    """``--terms OLD,NEW`` / ``--find-fix`` -> (old, new), or None for a regression search."""
    if text is None:
        return FIX_TERMS if find_fix else None
    words = tuple(w.strip() for w in text.split(","))
    if len(words) != 2:
        raise InputError(f"--terms {text}: give two words, OLD,NEW, e.g. --terms broken,fixed")
    return words[0], words[1]


class FixSearch:
    """``predicate`` with its verdicts inverted: passing is new (git's bad), failing old (git's good)."""

    def __init__(self, predicate: Predicate, terms: tuple[str, str]):
        self.predicate, self.terms = predicate, terms

    def preflight(self, repo: Any, commit: str) -> None:
        if type(self.predicate).setup is not BasePredicate.setup:
            raise InputError("--find-fix/--terms: this predicate judges each commit against GOOD "
                             "(a move beyond its spread), which a fix search cannot invert; use a command "
                             "or the invariants")
        self.predicate.preflight(repo, commit)

    def setup(self, good: str, checkout: Callable[[], Path]) -> None:
        self.predicate.setup(good, checkout)

    def identity(self) -> str:
        """Apart from the predicate's own (its verdicts are the other way round); the words are
        only words, so every fix search of one predicate shares its cached verdicts."""
        return json.dumps({"kind": "fix", "predicate": self.predicate.identity()})

    def probe(self, worktree: Path, commit: str, timeout: float | None) -> Probe:
        return invert(self.predicate.probe(worktree, commit, timeout))

    @property
    def measures(self) -> tuple[str, str] | None:
        """A measured predicate's (metric, direction) with the direction turned: the bug is
        ``direction``, so its fix is the move the other way (``change`` stays a change)."""
        inner = getattr(self.predicate, "measures", None)
        if not inner:
            return None
        metric, direction = inner
        return metric, {"lower": "higher", "higher": "lower"}.get(direction, direction)

    def one_run_per_probe(self) -> Any:
        """The measured search needs no inverted verdict: its runs are numbers, searched for the
        move :attr:`measures` names."""
        return self.predicate.one_run_per_probe()  # type: ignore[attr-defined]   # measures said it can


def invert(probe: Probe) -> Probe:
    """A probe read for a fix: passing is new (bad, to git), failing old (good); the report shows
    the terms (``ProbeRecord.term``)."""
    if probe.verdict not in _FLIP:
        return probe
    # git's 126/127 check on GOOD is for a command that fails everywhere; in a fix search that
    # is simply "never fixed", which NEW's probe then shows
    return replace(probe, verdict=_FLIP[probe.verdict], confirm_on_good=False)


#: How a regression search's words read in a fix search (OLD and NEW are the user's terms).
_REWORDED = (("BAD passes the predicate at least as often as GOOD", "NEW fails the predicate at least as often as OLD"),
             ("GOOD fails the predicate at least as often as BAD", "OLD passes the predicate at least as often as NEW"),
             ("made it fail more often", "made it pass more often"),
             ("BAD passes the predicate", "NEW still fails the predicate"),
             ("GOOD fails the predicate", "OLD already passes the predicate"),
             ("the predicate is probably broken", "the predicate probably does not show the bug"),
             ("the regression is not in this range", "the fix is not in this range"),
             ("the regression is older than the range", "the fix is older than the range"),
             ("no regression to bisect", "no fix to bisect"),
             ("not a regression in the direction asked", "not a fix in the direction asked"),
             ("GOOD already bad", "OLD already passes"),
             ("no regression in range", "no fix in range"))


def reword(message: str, terms: tuple[str, str]) -> str:
    """A strategy's conclusion, said for a fix search: "OLD already passes", "the fix is ..."."""
    for regression, fix in _REWORDED:
        message = message.replace(regression, fix)
    message = message.replace("OLD", f"OLD ({terms[0]})").replace("NEW", f"NEW ({terms[1]})")
    return message.replace("first bad commit", f"first {terms[1]} commit")
