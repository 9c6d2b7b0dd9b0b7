"""The documentation works: the tutorial runs as written, and no link points nowhere.

The tutorial (docs/tutorial.md) is run the way a reader runs it: its
```python blocks, in order, as one script in a process of its own. Each
```text block that follows a code block is what that code prints; the
script's output must be exactly those blocks, in order. The script gets an
empty database of its own on the suite's server through ``PGQUEUE_DSN``,
which the tutorial reads; it runs a second time without it, as a reader
without a server runs it, on an embedded server the tutorial starts itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
TUTORIAL = DOCS / "tutorial.md"

FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block of a Markdown text, as (language, body), in order."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def tutorial_script_and_output() -> tuple[str, str]:
    """The tutorial's Python blocks joined into one script, and the output it shows."""
    code: list[str] = []
    output: list[str] = []
    previous = ""
    for language, body in fenced_blocks(TUTORIAL.read_text()):
        if language == "python":
            code.append(body)
        elif language == "text":
            # Output is shown right after the code that prints it.
            assert previous == "python", "a text block in the tutorial must follow a python block"
            output.append(body)
        previous = language
    return "\n".join(code), "".join(output)


def test_tutorial_runs_every_block_but_the_install_command() -> None:
    # The test below runs the python blocks and checks the text blocks; the
    # one shell line installs the package the test already runs with.
    others = [
        (language, body)
        for language, body in fenced_blocks(TUTORIAL.read_text())
        if language not in ("python", "text")
    ]
    assert others == [("sh", "pip install 'pgqueue-jobs[embedded]'\n")]
    script, output = tutorial_script_and_output()
    # Tasks first; handlers taking a Job after them, as the lower level.
    assert script.index("@queue.task") < script.index("@worker.handler(")
    assert "send_receipt.options(conn=conn).enqueue(" in script and "queue.enqueue(" in script
    assert "worker.run(until_empty=True)" in script
    assert output.strip(), "the tutorial shows no output to check"


@pytest.mark.parametrize("server", ["PGQUEUE_DSN", "embedded"])
def test_tutorial_runs_as_written_and_prints_what_it_shows(
    request: pytest.FixtureRequest, tmp_path: Path, server: str
) -> None:
    """On a server named by ``PGQUEUE_DSN``, and as a reader without one runs it."""
    script, expected = tutorial_script_and_output()
    path = tmp_path / "tutorial.py"
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DSN"}
    if server == "PGQUEUE_DSN":
        env["PGQUEUE_DSN"] = request.getfixturevalue("empty_database")
    done = subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"the tutorial failed:\n{done.stdout}{done.stderr}"
    assert done.stdout == expected, f"stderr:\n{done.stderr}"


# -- links -------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
EXPLICIT_ID = re.compile(r"\{[^}]*#([\w-]+)[^}]*\}\s*$")
INLINE_CODE = re.compile(r"`+[^`\n]*`+")


def markdown_files() -> list[Path]:
    return [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]


def prose(text: str) -> str:
    """The text without fenced blocks, so that code is not read as links."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """The anchor a heading gets (Python-Markdown's toc, as mkdocs uses it)."""
    explicit = EXPLICIT_ID.search(heading)
    if explicit:
        return explicit.group(1)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for heading in HEADING.findall(prose(path.read_text())):
        base = slug(heading)
        name, n = base, 1
        while name in found:  # repeated headings get _1, _2, ...
            name, n = f"{base}_{n}", n + 1
        found.add(name)
    return found


def broken_links(path: Path) -> list[str]:
    text = INLINE_CODE.sub("", prose(path.read_text()))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading with that anchor")
    return broken


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_point_at_existing_files_and_headings(path: Path) -> None:
    assert broken_links(path) == []


def test_link_checker_notices_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[fine](#title) [gone](missing.md) [lost](#nowhere)\n")
    assert broken_links(page) == [
        "missing.md: no such file",
        "#nowhere: no heading with that anchor",
    ]


def test_every_docs_page_is_in_the_site_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if f" {p.name}" not in nav]
    assert missing == []
