"""rlbisect train's input checks (training itself: tests/tinyagent and tests/cli/test_app.py)."""

import pytest
from typer.testing import CliRunner

from rlbisect.cli.app import app


@pytest.mark.parametrize("seed", ["99999999999999999999", "-9223372036854775809"])
def test_a_seed_no_generator_can_take_is_bad_input_not_a_traceback(seed):
    r = CliRunner().invoke(app, ["train", "--steps", "1", f"--seed={seed}"])
    assert r.exit_code == 2 and f"--seed {seed}: a seed must be from -2**63 to 2**64 - 1" in r.output, r.output


def test_the_seed_range_is_torchs():
    import torch

    from rlbisect.cli.train import SEEDS
    for seed in (SEEDS[0], SEEDS[-1]):
        torch.Generator().manual_seed(seed)
    for seed in (SEEDS[0] - 1, SEEDS[-1] + 1):
        with pytest.raises((RuntimeError, ValueError, OverflowError)):
            torch.Generator().manual_seed(seed)
