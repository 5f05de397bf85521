"""The default detectors on real reference-trainer runs: silent on the healthy run, and on each
fault a snapshot within the first 8 steps whose `inspect --json` names the signal that exposed it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from reference_trainer.config import make_config
from reference_trainer.train import run
from rlbisect.cli.app import app
from rlbisect.tinyagent.train import make_hook

pytestmark = pytest.mark.slow   # they start torch processes or train: tests/conftest.py


def test_healthy_24_step_run_saves_nothing(tmp_path):
    res = CliRunner().invoke(app, ["train", "--steps", "24", "--seed", "0", "--eval-every", "100",
                                   "--snapshot-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "0 snapshot(s)" in res.output and not list(tmp_path.iterdir())


class _Fired(Exception):
    pass


@pytest.mark.parametrize("bug, knobs, signal", [
    ("mask_shift", {}, "logp_gap"),
    ("sampler_temp", {}, "logp_gap"),
    ("stale_old_logp", {}, "clip_frac+ratio_max"),
    ("ref_is_policy", {"kl_coef": 0.1}, "kl_ref"),
    ("ref_synced", {"kl_coef": 0.1}, "frozen_moved"),        # the hook's fingerprint of the frozen reference
    (None, {"lr": 1e-2}, "approx_kl"),
])
def test_fault_fires_within_8_steps_naming_the_signal(bug, knobs, signal, tmp_path):
    cfg = make_config(seed=0, **knobs)
    hook = make_hook(tmp_path, None, cfg, bug)  # exactly what `rlbisect train --snapshot-dir` arms

    def stop_at_first_hit(row: dict) -> None:  # the later steps cannot change the answer
        if hook.hits:
            raise _Fired
    with pytest.raises(_Fired):
        run(cfg, 8, bug, eval_every=100, on_row=stop_at_first_hit, hook=hook)
    first, = hook.kept()
    res = CliRunner().invoke(app, ["inspect", str(first), "--json"])
    info = json.loads(res.output)
    assert res.exit_code == 0 and info["step"] < 8
    assert signal in [h["signal"] for h in info["hits"]], info["hits"]
