"""The length-bias pair and the healthy bar of issue 14, seed by seed.

Pair: `--max-turns 12`, 16 steps, one seed, `token_mean` against `seq_mean_token_mean`. It holds on a
seed when all five bars do: seq's failing episodes grow (last-4 `length_fail` >= 1.5x its first 4),
are longer than token_mean's (>= 1.3x its last 4), take more turns, and neither the training reward
(last 4) nor the final held-out pass rate differs by more than 0.1. Healthy (24 steps): step-0
reward <= 0.3, last-4 reward in 0.55-0.85, held-out >= 0.55 at the end.

Usage: python benchmarks/bench_length_bias.py [--seeds 0,1,2]   (about 15 s per seed)
"""

from __future__ import annotations

import argparse

from reference_trainer.config import make_config
from reference_trainer.train import run


def mean(rows, key):
    return sum(r[key] for r in rows) / len(rows)


def pair(seed: int) -> dict:
    token = run(make_config(seed=seed, max_turns=12), 16)
    seq = run(make_config(seed=seed, max_turns=12, loss_mode="seq_mean_token_mean"), 16)
    grow = mean(seq[-4:], "length_fail") / mean(seq[:4], "length_fail")
    vs_token = mean(seq[-4:], "length_fail") / mean(token[-4:], "length_fail")
    reward_gap = mean(seq[-4:], "reward") - mean(token[-4:], "reward")
    eval_gap = seq[-1]["eval_pass"] - token[-1]["eval_pass"]
    bars = {"grow": grow >= 1.5, "vs_token": vs_token >= 1.3,
            "turns": mean(seq[-4:], "turns") > mean(token[-4:], "turns"),
            "reward": abs(reward_gap) <= 0.1, "held_out": abs(eval_gap) <= 0.1}
    print(f"seed {seed}: length_fail token {mean(token[:4], 'length_fail'):.1f} -> {mean(token[-4:], 'length_fail'):.1f}, "
          f"seq {mean(seq[:4], 'length_fail'):.1f} -> {mean(seq[-4:], 'length_fail'):.1f} (grow {grow:.2f}x, "
          f"{vs_token:.2f}x token); turns {mean(token[-4:], 'turns'):.2f} / {mean(seq[-4:], 'turns'):.2f}; "
          f"reward {mean(token[-4:], 'reward'):.2f} / {mean(seq[-4:], 'reward'):.2f} ({reward_gap:+.2f}); "
          f"held-out {token[-1]['eval_pass']:.2f} / {seq[-1]['eval_pass']:.2f} ({eval_gap:+.2f}); "
          f"{'holds' if all(bars.values()) else 'misses: ' + ', '.join(k for k, ok in bars.items() if not ok)}",
          flush=True)
    return bars


def healthy(seed: int) -> bool:
    h = run(make_config(seed=seed), 24)
    ok = h[0]["reward"] <= 0.3 and 0.55 <= mean(h[-4:], "reward") <= 0.85 and h[-1]["eval_pass"] >= 0.55
    print(f"seed {seed}: healthy reward {h[0]['reward']:.2f} at step 0, {mean(h[-4:], 'reward'):.2f} last 4; "
          f"held-out {h[0]['eval_pass']:.2f} -> {h[-1]['eval_pass']:.2f}; {'holds' if ok else 'misses'}", flush=True)
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated RL seeds")
    seeds = [int(s) for s in ap.parse_args().seeds.split(",")]
    held = [s for s in seeds if all(pair(s).values())]
    ok = [s for s in seeds if healthy(s)]
    print(f"pair holds on {len(held)}/{len(seeds)} seeds {held}; healthy bar on {len(ok)}/{len(seeds)} {ok}")


if __name__ == "__main__":
    main()
