"""Bisect a real verl fix over verl's own history, with the shipped checks as predicate.

Each case is a window of verl's real history (a bug from verl's issue tracker, a window where
nothing should fire, or one reaching back to commits the adapter cannot run on) and the answer it
must end with: the known fix commit, "BAD passes" (exit 5: nothing to bisect), or no answer because
only skipped commits are left (exit 3). Every case runs

    python -m rlbisect run GOOD..BAD --repo CLONE --adapter rlbisect.frameworks.verl:demo
        [--find-fix] [--adapter-opt K=V ...] --no-cache --json ...

so each probe imports verl from its own checkout (the invariants predicate puts it first on
sys.path) with this interpreter's torch and transformers. The table shows the commit named, whether
it is the expected answer, probes, wall time, skips (by cause) and probes judged from an exception
("raised"): the acceptance is a right answer or skips, never a verdict drawn from an adapter crash.

The bug: verl#6278. On the padded path (use_remove_padding=False) the FSDP engine built the
attention mask of the whole prompt+response from the response-only loss_mask, so the policy's
forward attended to the wrong tokens; fixed by verl#6345 (baccd33a0, 2026-05-14). Checks 2 and 5
and the run-level log-prob checks fail before it. The windows are on verl's main line
(github.com/verl-project/verl, formerly volcengine/verl): v0.7.1 is a release branch off it.

This script never fetches: bring a clone yourself (`git clone https://github.com/verl-project/verl`,
then `git submodule update --init recipe`: since 2bb42bae6 (2026-01-06) every commit records the
verl-recipe submodule, and a probe whose submodule commit is not in the local clone is skipped
for "machinery"; 9 commits of 2026-01-05..08, v0.7.0 among them, record verl-recipe commits that a
clone of it (to 2026-08-07) lacks: those stay skips).

Usage: python benchmarks/bench_verl_history.py --verl-clone /work/verl-history [--cases fix-6345,quiet]
           [--json results.json] [--timeout 600] [--python /work/venvs/verl-0.9.1/bin/python]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import history_bisect  # noqa: E402

ADAPTER = "rlbisect.frameworks.verl:demo"
FIX_6345 = "baccd33a0125735b497290e11beb28b1a13bd6ad"
# 9a70e2358 (verl#6150, 2026-04-29): forward_step honours the configured dtype. Before it the
# forward ran under bf16 autocast whatever the config, which fails the fp32 checks on its own;
# `rlbisect run` has no --thresholds, so the narrow window starts where only the mask bug is left.
DTYPE_FIX = "9a70e2358"
# verl on main imports with transformers 5 from 19f0bd879 (verl#5445, 2026-03-03); before it
# `verl.utils.model` asks for AutoModelForVision2Seq and the adapter cannot run (exit 125).

# `expect` is a commit (the answer must be it) or an outcome the exit code names. The windows use
# tags where they can; a clone whose tags differ can name its own with --window NAME=GOOD..BAD.
CASES: list[dict] = [
    {
        "name": "fix-6345",
        "what": "padded path: attention mask built from the response-only loss_mask",
        "links": ["https://github.com/verl-project/verl/issues/6278", "https://github.com/verl-project/verl/pull/6345"],
        "window": f"{DTYPE_FIX}..v0.8.0", "find_fix": True, "opts": {}, "expect": FIX_6345,
    },
    {
        # from the 0.7.0 release: the older commits do not import with transformers 5 (a skip if
        # probed), the next ones fail for the bf16 forward as well; the first passing one is the fix
        "name": "fix-6345-wide",
        "what": "as fix-6345, from verl 0.7.0 to 0.8.0 (703 commits)",
        "links": ["https://github.com/verl-project/verl/pull/6345"],
        "window": "v0.7.0..v0.8.0", "find_fix": True, "opts": {}, "expect": FIX_6345,
    },
    {
        # every check must pass at BAD, so the run ends with "BAD passes", never a culprit
        "name": "quiet",
        "what": "default settings over the 0.8.0 -> 0.9.0 release window",
        "links": [],
        "window": "v0.8.0..v0.9.0", "find_fix": False, "opts": {}, "expect": "bad-passes",
    },
    {
        "name": "quiet-head",
        "what": "default settings from 0.8.0 to the newest commit of the clone's main",
        "links": [],
        "window": "v0.8.0..HEAD", "find_fix": False, "opts": {}, "expect": "bad-passes",
    },
    {
        # as a regression: the checks fail from the first commit that imports (19f0bd879) on, and
        # the commits before it are skipped, so the honest answer is "one of these", never a
        # skipped commit called good or bad. GOOD sits just before the boundary: from v0.7.0 git
        # must skip each of the 281 unrunnable commits (4 s each) before it gives up
        "name": "old-skips",
        "what": "the commits where verl starts importing with transformers 5, up to the last bf16-forward one",
        "links": ["https://github.com/verl-project/verl/pull/5445"],
        "window": f"19f0bd879~6..{DTYPE_FIX}~1", "find_fix": False, "opts": {}, "expect": "skips",
    },
]
if __name__ == "__main__":
    sys.exit(history_bisect.main("verl", ADAPTER, CASES, __doc__, "one with verl's dependencies"))
