"""The README's first lines are the fresh-machine contract; CI must run its test command."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_opens_with_the_two_commands_and_ci_runs_the_second():
    lines = [line.strip() for line in (ROOT / "README.md").read_text().splitlines()[:4] if line.strip()]
    demo, tests = lines[1], lines[2]
    assert demo.endswith("rlbisect demo") and "pip install" in demo
    assert tests.startswith("pip install torch==2.13.0")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q torch==2.13.0" in ci
    assert tests.split("&& ", 1)[1].replace("pip install", "python -m pip install -q") in ci
