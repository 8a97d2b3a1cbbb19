"""The README and docs/ promise nothing that is not there: every relative link reaches a file (and a heading, when
it names one), and every `make` target they name exists in the Makefile."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
MAKE = re.compile(r"\bmake ((?:[a-z][\w-]*)(?: [a-z][\w-]*)*)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = CODE.sub(lambda m: "" if m.group(0).startswith("```") else m.group(0), page.read_text())
    return {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_reaches_its_file_and_heading(page):
    text = CODE.sub("", page.read_text())
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {path}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.name}")
    assert not broken, broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_make_target_named_exists(page):
    targets = makefile_targets()
    named = {words.split()[0] for span in CODE.findall(page.read_text()) for words in MAKE.findall(span)}
    if page.name == "README.md":
        assert {"serve", "test"} <= named, named
    missing = sorted(named - targets - {"install"})
    assert not missing, f"{page.name} names make targets the Makefile lacks: {missing}"


def test_the_checks_see_a_broken_link_and_a_missing_target(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [bad](#nothing) [gone](missing.md) `make nosuchtarget`\n")
    assert anchors(page) == {"title"}
    assert LINK.findall(CODE.sub("", page.read_text())) == ["#title", "#nothing", "missing.md"]
    assert {w.split()[0] for s in CODE.findall(page.read_text()) for w in MAKE.findall(s)} == {"nosuchtarget"}
