"""Without verl (CI's interpreter): the package imports nothing of verl, and the demo says it
cannot run."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow    # a subprocess (tests/conftest.py's rule)
def test_importing_the_package_imports_no_verl():
    code = ("import sys, rlbisect.frameworks.verl as v; assert 'verl' not in sys.modules; "
            "assert not any(m.startswith(('verl.', 'torch')) for m in sys.modules); print(sorted(v.__all__))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "demo" in done.stdout


def test_a_verl_snapshot_without_verl_cannot_replay_and_says_why(monkeypatch):
    import torch

    from rlbisect.steps.format import RngState, Snapshot
    from rlbisect.steps.replay import ReplayError, replay_in_process
    monkeypatch.setitem(sys.modules, "verl", None)      # as on a machine without verl
    snap = Snapshot(step=0, model={"w": torch.zeros(1)}, optimizer=None, batch={}, rng=RngState(),
                    config={"trainer": "verl"})
    with pytest.raises(ReplayError, match="a verl snapshot replays with verl: .*pip install 'rlbisect\\[verl\\]'"):
        replay_in_process(snap)
