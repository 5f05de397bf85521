"""--thresholds: fp32, bf16 or a JSON file of limits; anything else is refused with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlbisect.check.thresholds import Thresholds
from rlbisect.errors import InputError

ROOT = Path(__file__).resolve().parents[2]


def test_named_thresholds_and_a_file(tmp_path):
    assert Thresholds.named(None) == Thresholds() == Thresholds.named("fp32")
    assert Thresholds.named("bf16") == Thresholds.bf16()
    (tmp_path / "t.json").write_text(json.dumps({"logp_gap": 0.02, "accumulation": 1e-3}))
    got = Thresholds.named(str(tmp_path / "t.json"))
    assert (got.logp_gap, got.accumulation, got.ratio) == (0.02, 1e-3, Thresholds().ratio)


@pytest.mark.parametrize("content,message", [
    ({"logp_gap": 0.1, "logp_gapp": 1}, "unknown key 'logp_gapp'"),
    ({"ratio": "big"}, "ratio: Input should be a valid number"),
    ([1, 2], "not a JSON object of limits"),
    ({"logp_gap": float("nan")}, "logp_gap: Input should be a finite number"),      # no limit at all
    ({"ratio": float("inf")}, "ratio: Input should be a finite number"),
    ({"approx_kl": -1}, "approx_kl: Input should be greater than or equal to 0"),   # passes a stale 0
])
def test_a_bad_file_is_refused_naming_what_is_wrong(tmp_path, content, message):
    (tmp_path / "t.json").write_text(json.dumps(content))     # json writes NaN and Infinity bare, as a user may
    with pytest.raises(InputError, match=message):
        Thresholds.named(str(tmp_path / "t.json"))


@pytest.mark.slow
def test_the_cli_exits_2_with_one_line_before_running_anything(tmp_path):
    (tmp_path / "t.json").write_text('{"bogus": 1}')
    for spec in [str(tmp_path / "t.json"), "fp16"]:
        done = subprocess.run([sys.executable, "-m", "rlbisect", "check", "--thresholds", spec],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.startswith("rlbisect check: --thresholds") and done.stderr.count("\n") == 1
