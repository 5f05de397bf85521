"""Bisect real GRPO regressions and fixes over TRL's own history, with the shipped checks as predicate.

Each case is a window of TRL's real history (a bug from TRL's issue tracker, or a window where
nothing should fire, or one reaching back to commits the adapter cannot run on) and the answer it
must end with: the known fix/culprit commit, "BAD passes" (exit 5: nothing to bisect), or no answer
because only skipped commits are left (exit 3). Every case runs

    python -m rlbisect run GOOD..BAD --repo CLONE --adapter rlbisect.frameworks.trl:demo
        [--find-fix] [--adapter-opt K=V ...] --no-cache --json ...

so each probe imports TRL from its own checkout (the invariants predicate puts it first on
sys.path) with this interpreter's transformers and torch. The table shows the commit named, whether
it is the expected answer, probes, wall time, skips (by cause) and probes judged from an exception
("raised"): the acceptance is a right answer or skips, never a verdict drawn from an adapter crash.

This script never fetches: bring a clone yourself (e.g. `git clone https://github.com/huggingface/trl`).

Usage: python benchmarks/bench_trl_history.py --trl-clone /work/trl-history [--cases fix-6439,quiet]
           [--json results.json] [--timeout 600] [--python /work/venvs/trl-1.8.0/bin/python]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import history_bisect  # noqa: E402

ADAPTER = "rlbisect.frameworks.trl:demo"
TRUNCATED_DAPO = {"loss_type": "dapo", "mask_truncated_completions": True}

# `expect` is a commit (the answer must be it) or an outcome the exit code names. The windows use
# tags where they can; a clone whose tags differ can name its own with --window NAME=GOOD..BAD.
CASES: list[dict] = [
    {
        "name": "fix-6439",
        "what": "dapo/cispo/vespo loss normalizer counts tokens mask_truncated_completions drops; "
                "a fully truncated micro-batch divides 0 by 0",
        "links": ["https://github.com/huggingface/trl/issues/6369", "https://github.com/huggingface/trl/pull/6439"],
        "window": "v1.8.0..v1.9.0", "find_fix": True, "opts": TRUNCATED_DAPO,
        "expect": "7c1fa85ad5d1878edef7a795c74e91749961b152",
    },
    {
        # the same fix from the whole 1.x range: more probes, and commits whose internals differ
        "name": "fix-6439-wide",
        "what": "as fix-6439, from TRL 1.0.0 to the newest commit of the clone",
        "links": ["https://github.com/huggingface/trl/pull/6439"],
        "window": "v1.0.0..HEAD", "find_fix": True, "opts": TRUNCATED_DAPO,
        "expect": "7c1fa85ad5d1878edef7a795c74e91749961b152",
    },
    {
        # a logging-only bug (training used the weighted reward, the dashboard the unweighted sum),
        # found by the run-level check that compares the logged metrics with the step's batch; the
        # run-B failure of releases before trl#5890 is outside the predicate (--checks)
        "name": "fix-5353",
        "what": "the logged reward ignores reward_weights (the demo weighs its two reward functions)",
        "links": ["https://github.com/huggingface/trl/issues/5352", "https://github.com/huggingface/trl/pull/5353"],
        "window": "v0.29.0..v1.0.0", "find_fix": True, "opts": {}, "checks": ["logged metrics = the step's batch"],
        "expect": "eff92425d4d775e196df2dc28d154100b1ff443f",
    },
    {
        # at default settings the fix is invisible (nothing truncated is masked): every check must
        # pass at BAD, so the run ends with "BAD passes", never a culprit
        "name": "quiet",
        "what": "default settings over the 1.8 -> 1.9 window (96 commits, the fix above included)",
        "links": [],
        "window": "v1.8.0..v1.9.0", "find_fix": False, "opts": {},
        "expect": "bad-passes",
    },
    {
        "name": "quiet-wide",
        "what": "default settings over all of 1.x in the clone: probes spread over releases whose internals differ",
        "links": [],
        "window": "v1.0.0..HEAD", "find_fix": False, "opts": {},
        "expect": "bad-passes",
    },
    {
        "name": "quiet-0.29",
        "what": "default settings over 0.29 -> 1.0, older than the range the adapter was read against",
        "links": [],
        "window": "v0.29.0..v1.0.0", "find_fix": False, "opts": {},
        "expect": "bad-passes",
    },
    {
        # TRL before c3ead5b55 (2026-02-20) does not import with this transformers (a missing optional
        # `weave`, then a NameError in trl/import_utils.py): the adapter cannot run there (exit 125).
        # The fix-6439 bug is older than that commit, so the first failing commit sits right after
        # skipped ones: the honest answer is "one of these", never a skipped commit called bad
        "name": "old-skips",
        "what": "the fix-6439 settings as a regression across the commits where TRL stops failing to import",
        "links": ["https://github.com/huggingface/trl/issues/6369"],
        "window": "699b8420c~1..v1.0.0", "find_fix": False, "opts": TRUNCATED_DAPO,
        "expect": "skips",
    },
]
if __name__ == "__main__":
    sys.exit(history_bisect.main("TRL", ADAPTER, CASES, __doc__, "e.g. a venv with an older transformers"))
