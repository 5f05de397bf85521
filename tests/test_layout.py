"""The README's layout section is the tree: every module listed with its docstring's summary line.

Run ``python tests/test_layout.py`` to print the section as it should be.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = {"reference_trainer": "TinyAgent: the embedded trainer the toolkit is demonstrated and tested on",
       "history_fixtures": "simulated git histories: real code changes, one of which introduces a fault",
       "benchmarks": "one script per number the README reports",
       "tests": "mirror the packages; shared helpers in conftest.py and helpers.py"}


def summary(path: Path) -> str:
    """The docstring's first line, as plain text (no reST markup)."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    line = doc.splitlines()[0] if doc else ""
    return re.sub(r":\w+:`([^`]+)`", r"\1", line).replace("``", "")


def layout() -> str:
    """The layout block: rlbisect's packages and modules with their summaries, then the rest."""
    lines = ["rlbisect/"]

    def walk(folder: Path, depth: int) -> None:
        for path in sorted(folder.iterdir(), key=lambda p: (p.is_dir(), p.name)):
            if path.name == "__init__.py" or path.name.startswith((".", "_")):
                continue
            name = path.name + ("/" if path.is_dir() else "")
            if path.is_dir() and (path / "__init__.py").exists():
                lines.append(f"{'  ' * depth}{name:<{28 - 2 * depth}}{summary(path / '__init__.py')}")
                walk(path, depth + 1)
            elif path.suffix == ".py":
                lines.append(f"{'  ' * depth}{name:<{28 - 2 * depth}}{summary(path)}")
    walk(ROOT / "rlbisect", 1)
    lines += [f"{name + '/':<28}{what}" for name, what in TOP.items()]
    return "\n".join(lines)


def test_readme_layout_is_the_tree():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Layout\n.*?```\n(.*?)```", readme, re.S)
    assert block, "the README has no ## Layout section with a code block"
    assert block[1].rstrip() == layout(), "run `python tests/test_layout.py` and paste its output"


if __name__ == "__main__":
    print(layout())


def test_the_embedded_trainer_is_imported_in_one_place_each():
    """The toolkit works on any trainer: only tinyagent.py imports reference_trainer, and only
    demo.py imports history_fixtures (README, Layout)."""
    importers: dict[str, set[str]] = {"reference_trainer": set(), "history_fixtures": set()}
    for path in (ROOT / "rlbisect").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                if name.split(".")[0] in importers:
                    importers[name.split(".")[0]].add(path.name)
    assert importers == {"reference_trainer": {"tinyagent.py"}, "history_fixtures": {"demo.py"}}
