"""docs/architecture.md's layout block is the tree: every package and module with its summary line.

Run ``python tests/test_layout.py`` to print the block as it should be. The rule, so the block is
deterministic: every package under ``rlbisect/`` (a folder with ``__init__.py``, private ones such
as ``_proc/`` included: they are real packages) and every module in it, private ones included;
``__init__.py`` gives its package's line and ``__main__.py`` (``python -m rlbisect``) is left out.
Files come before folders, each group sorted by name; a line is the first line of the docstring.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SKIPPED = {"__init__.py", "__main__.py"}
TOP = {"reference_trainer": "TinyAgent: the embedded trainer the toolkit is demonstrated and tested on",
       "history_fixtures": "simulated git histories: real code changes, one of which introduces a fault",
       "benchmarks": "one script per measured figure in docs/benchmarks.md",
       "docs": "the manual: one page per tool, the CLI reference, this page",
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
            if path.name in SKIPPED or path.name.startswith(".") or path.name == "__pycache__":
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


def test_architecture_layout_is_the_tree():
    block = re.search(r"## Layout\n.*?```\n(.*?)```", ARCHITECTURE.read_text(), re.S)
    assert block, "docs/architecture.md has no ## Layout section with a code block"
    assert block[1].rstrip() == layout(), "run `python tests/test_layout.py` and paste its output"


def test_every_package_has_a_summary():
    """A package or module without a docstring would leave a hole in the layout block."""
    missing = [line.split()[0] for line in layout().splitlines()[1:] if len(line.split()) < 2]
    assert not missing, f"no docstring summary: {missing}"


def test_the_embedded_trainer_is_imported_in_one_place_each():
    """The toolkit works on any trainer: only rlbisect/tinyagent/ imports reference_trainer, and
    only rlbisect/tinyagent/demo.py imports history_fixtures (docs/architecture.md)."""
    importers: dict[str, set[str]] = {"reference_trainer": set(), "history_fixtures": set()}
    for path in (ROOT / "rlbisect").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for name in names:
                if name.split(".")[0] in importers:
                    importers[name.split(".")[0]].add(path.relative_to(ROOT).as_posix())
    outside = sorted(p for p in importers["reference_trainer"] if not p.startswith("rlbisect/tinyagent/"))
    assert not outside, f"only rlbisect/tinyagent/ may import reference_trainer: {outside}"
    assert importers["reference_trainer"], "rlbisect/tinyagent/ no longer imports reference_trainer"
    assert importers["history_fixtures"] == {"rlbisect/tinyagent/demo.py"}


def write() -> None:
    """Put the generated block into docs/architecture.md (``python tests/test_layout.py --write``)."""
    text = ARCHITECTURE.read_text()
    block = re.search(r"(## Layout\n.*?```\n)(.*?)(```)", text, re.S)
    assert block, "docs/architecture.md has no ## Layout section with a code block"
    ARCHITECTURE.write_text(text[:block.start(2)] + layout() + "\n" + text[block.end(2):])


if __name__ == "__main__":
    import sys
    write() if "--write" in sys.argv else print(layout())


def package_graph() -> dict[str, set[str]]:
    """rlbisect's packages (and top-level modules) -> what they import of each other, every import
    statement counted (those inside functions too)."""
    package = ROOT / "rlbisect"
    edges: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        me = path.relative_to(package).parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for name in names:
                if name.startswith("rlbisect.") and (other := name.split(".")[1]) != me:
                    edges.setdefault(me, set()).add(other)
    return edges


def test_the_packages_import_each_other_without_a_cycle():
    edges = package_graph()

    def reach(start: str) -> set[str]:
        seen, stack = set(), [start]
        while stack:
            for other in edges.get(stack.pop(), ()):
                if other not in seen:
                    seen.add(other)
                    stack.append(other)
        return seen
    cycles = sorted(p for p in edges if p in reach(p))
    assert not cycles, f"import cycles through {cycles}: {edges}"
    assert "bisect" not in reach("steps")         # snapshots and replay stand without the bisect
    assert edges.get("_proc", set()) <= {"errors"} and edges.get("git", set()) <= {"errors", "_proc"}
    assert not reach("check") & {"bisect", "steps", "cli", "tinyagent", "frameworks"}


def test_a_few_top_level_modules_and_none_over_300_lines():
    top = sorted(p.name for p in (ROOT / "rlbisect").glob("*.py"))
    assert len(top) <= 6, top
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "rlbisect").rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 300}
    assert not long, long
