"""The settings grids of bench_trl_settings.py and bench_verl_settings.py: every level of every
factor alone (the others at their first level), then a seeded sample of the rest of the product."""

from __future__ import annotations

import itertools
import random


def one_at_a_time(factors: dict[str, list]) -> list[dict]:
    """The default cell (every factor at its first level), then each other level alone."""
    default = {k: v[0] for k, v in factors.items()}
    return [default] + [{**default, k: v} for k, values in factors.items() for v in values[1:]]


def sampled(factors: dict[str, list], chosen: list[dict], sample: int, seed: int) -> tuple[list[dict], int]:
    """``chosen`` and ``sample`` more cells of the product drawn with ``seed`` -> (cells, product size)."""
    product = [dict(zip(factors, combo)) for combo in itertools.product(*factors.values())]
    rest = [c for c in product if c not in chosen]
    return chosen + random.Random(seed).sample(rest, min(sample, len(rest))), len(product)
