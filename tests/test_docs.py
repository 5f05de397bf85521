"""The README and docs/ held to the code: a short README, links that resolve, no project-history
references in user docs, and a CLI reference generated from the real command table.

Run ``python tests/test_docs.py`` to print docs/cli.md as it should be (``--write`` writes it).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CLI_MD = DOCS / "cli.md"
MAX_README_LINES = 250
WIDTH = 100          # help is wrapped at this width, whatever the terminal

#: Project history belongs in CHANGELOG.md, not in a page a user reads.
HISTORY = [re.compile(p, re.I) for p in (r"\bissues?\s*#?\d+", r"(?<![\w/&.-])#\d+\b",
                                         r"\bPR\s*#?\d+", r"\bthis round\b", r"\bprevious release\b")]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code (links there are code, not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to '-'."""
    seen: dict[str, int] = {}
    out = set()
    for line in re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M).splitlines():
        if m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line):
            slug = re.sub(r"[^\w\- ]", "", m[1].lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(path: Path) -> list[str]:
    """The relative links (and image paths) of a page."""
    return [t for t in LINK.findall(prose(path.read_text()))
            if not re.match(r"[a-z][a-z0-9+.-]*:", t, re.I)]


def cli_reference() -> str:
    """docs/cli.md: ``rlbisect NAME --help`` for every command in the application's table."""
    from typer.testing import CliRunner

    from rlbisect.cli.app import COMMANDS, app
    runner = CliRunner()
    out = ["# Command-line reference", "",
           "Generated from `rlbisect COMMAND --help` for every command in `rlbisect.cli.app.COMMANDS`",
           "by `python tests/test_docs.py --write`; `tests/test_docs.py` fails when this page is out of",
           "date. [README](../README.md) has the overview.", "",
           " · ".join(f"[{name}](#rlbisect-{name})" for name in COMMANDS), ""]
    for name in COMMANDS:
        # the width both ways: click's own (terminal_width) and the environment's, for this call only
        result = runner.invoke(app, [name, "--help"], prog_name="rlbisect", terminal_width=WIDTH,
                               color=False, env={"COLUMNS": str(WIDTH)})
        assert result.exit_code == 0, f"rlbisect {name} --help exited {result.exit_code}: {result.output}"
        out += [f"## rlbisect {name}", "", "```", result.output.rstrip(), "```", ""]
    return "\n".join(out)


def test_readme_is_short():
    lines = README.read_text().count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines (at most {MAX_README_LINES}): move prose to docs/"


def test_no_project_history_in_user_docs():
    found = [f"{path.relative_to(ROOT)}:{n}: {m[0]!r}"
             for path in pages() for n, line in enumerate(path.read_text().splitlines(), 1)
             for pattern in HISTORY if (m := pattern.search(line))]
    assert not found, "project history belongs in CHANGELOG.md:\n" + "\n".join(found)


def test_every_relative_link_resolves():
    broken = []
    for path in pages():
        for target in links(path):
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_readme_links_every_docs_page():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README) if t.partition("#")[0]}
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert not missing, f"README.md does not link docs/{', docs/'.join(missing)}"
    absent = sorted(str(p.relative_to(ROOT)) for p in linked if p.suffix == ".md" and not p.exists())
    assert not absent, f"README.md links pages that do not exist: {absent}"


def test_every_command_has_an_example_and_the_cli_reference_is_current():
    reference = cli_reference()
    from rlbisect.cli.app import COMMANDS
    for name in COMMANDS:
        section = reference.split(f"## rlbisect {name}\n", 1)[1].split("\n## ", 1)[0]
        assert "Example:" in section, f"rlbisect {name} --help has no 'Example:'"
    assert CLI_MD.exists() and CLI_MD.read_text() == reference + "\n", \
        "docs/cli.md is out of date: run `python tests/test_docs.py --write`"


if __name__ == "__main__":
    text = cli_reference() + "\n"
    if "--write" in sys.argv[1:]:
        CLI_MD.write_text(text)
    else:
        sys.stdout.write(text)
