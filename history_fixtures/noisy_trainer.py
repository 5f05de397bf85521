"""A toy trainer's git history in which no two commits draw the same random numbers.

On accelerators the same seed rarely gives the same run after a benign commit (kernels, reduction
order), so matched seeds cannot be counted on. This history models that: every commit changes
``SALT``, which reseeds the trainer's stream, and from the culprit on the final reward is lower by
``shift`` seed spreads. ``kind`` is the seed distribution (unit spread): ``normal``, ``heavy``
(Student t with 3 degrees of freedom, scaled to unit standard deviation) or ``spread`` (the
culprit doubles the spread and leaves the mean: ``shift`` is ignored). With ``kept``, every commit
keeps the stream instead: the same seed gives the same run wherever the code has not changed it.

    python train.py --seed 3 --out /tmp/run    # writes /tmp/run/metrics.jsonl, 4 rows

Used by ``benchmarks/bench_measured.py`` and the tests of the measured search.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

TRAIN = '''import argparse, json, math, os, random
# commit {index}
SALT = {salt}
SHIFT = {shift}
SCALE = {scale}
KIND = {kind!r}
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, required=True)
p.add_argument("--out", required=True)
a = p.parse_args()
rng = random.Random(SALT * 1000003 + a.seed)
if KIND == "heavy":   # Student t, 3 degrees of freedom, unit standard deviation
    noise = rng.gauss(0, 1) / math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(3)) / 3) / math.sqrt(3)
else:
    noise = rng.gauss(0, 1)
final = 1.0 + SHIFT + SCALE * noise
os.makedirs(a.out, exist_ok=True)
with open(os.path.join(a.out, "metrics.jsonl"), "w") as f:
    for step in range(4):
        f.write(json.dumps({{"step": step, "reward": final - 0.1 * (3 - step)}}) + "\\n")
'''


def _git(root: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00", "PATH": "/usr/bin:/bin:/usr/local/bin",
           "HOME": str(root)}
    return subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=root, env=env,
                          check=True, capture_output=True, text=True).stdout.strip()


def build(root: Path, commits: int, culprit: int, shift: float, kind: str = "normal",
          salt: int = 0, kept: bool = False) -> list[str]:
    """A repository at ``root`` of ``commits + 1`` commits (GOOD first); commit ``culprit``
    (1..commits) is the first with the regression. Returns the shas, oldest first. ``kept``: every
    commit keeps the random stream (a deterministic trainer whose seeds match across commits)."""
    if not 1 <= culprit <= commits or kind not in ("normal", "heavy", "spread"):
        raise ValueError("culprit must be in 1..commits and kind normal, heavy or spread")
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q")
    shas = []
    for i in range(commits + 1):
        bad = i >= culprit
        text = TRAIN.format(index=i, salt=salt * 100003 + (0 if kept else i), kind=kind,
                            shift=-shift if bad and kind != "spread" else 0.0,
                            scale=2.0 if bad and kind == "spread" else 1.0)
        (root / "train.py").write_text(text)
        _git(root, "add", "train.py")
        _git(root, "commit", "-q", "-m", f"commit {i}" + (" (culprit)" if i == culprit else ""))
        shas.append(_git(root, "rev-parse", "HEAD"))
    return shas
