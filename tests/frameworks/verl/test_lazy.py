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
