"""The repository's documents hold together: every relative link resolves to a file inside the repository (and
every #anchor to a heading of it), the docs index lists every document, and the project files say what the
tree does.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO

SKIPPED_DIRS = {"build", "dist", "node_modules", "artifacts"}  # plus every dot-directory and *.egg-info
INDEX = REPO / "docs" / "README.md"
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
INLINE_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*(\S+)", re.MULTILINE)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
# Switches of the quick loop: each is read by the tests or .ci/run, and CONTRIBUTING.md explains it.
SWITCHES = ("AGENTCTL_SKIP_PACKAGING", "AGENTCTL_REQUIRE_BROWSER", "AGENTCTL_CHROMIUM", "AGENTCTL_FAST_AGENT",
            "AGENTCTL_O200K_PATH", "AGENTCTL_AGENT_BIN")


def _skipped(path: Path) -> bool:
    parts = path.relative_to(REPO).parts[:-1]
    return any(p.startswith(".") or p in SKIPPED_DIRS or p.endswith(".egg-info") for p in parts)


DOCUMENTS = sorted(p for p in REPO.rglob("*.md") if not _skipped(p))


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def prose(text: str) -> str:
    """The text without fenced blocks and code spans: a `[x](y)` inside code is an example, not a link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(path: Path) -> list[str]:
    text = prose(path.read_text())
    return INLINE_LINK.findall(text) + REFERENCE_LINK.findall(text)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(h) for h in HEADING.findall(FENCE.sub("", path.read_text()))}


def local_targets(path: Path) -> list[tuple[str, Path | None, str]]:
    """(link as written, the file it names or None for the same document, fragment) of each relative link."""
    found = []
    for link in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", link, re.IGNORECASE):  # http:, https:, mailto:
            continue
        target, _, fragment = link.partition("#")
        found.append((link, (path.parent / target).resolve() if target else None, fragment))
    return found


def test_the_documents_are_found():
    names = {_rel(p) for p in DOCUMENTS}
    assert {"README.md", "CONTRIBUTING.md", "CHANGELOG.md", "docs/README.md", "docs/design.md"} <= names


def broken_links(document: Path, root: Path = REPO) -> list[str]:
    broken = []
    for link, target, fragment in local_targets(document):
        if target is not None and not target.is_relative_to(root):
            broken.append(f"{link}: outside the repository")
        elif target is not None and not target.exists():
            broken.append(f"{link}: no such file")
        elif fragment and (target or document).suffix == ".md" and fragment not in anchors(target or document):
            broken.append(f"{link}: no heading with the anchor #{fragment}")
    return broken


@pytest.mark.parametrize("document", DOCUMENTS, ids=_rel)
def test_every_relative_link_resolves_inside_the_repository(document):
    broken = broken_links(document)
    assert not broken, f"{_rel(document)}:\n  " + "\n  ".join(broken)


def test_the_link_check_catches_a_link_out_of_the_repository_a_missing_file_and_a_wrong_anchor(tmp_path):
    """The control for the test above: in a tree of its own, a document with one broken link of each kind,
    good links with anchors, and a link inside code that is not a link."""
    (tmp_path / "DESIGN.md").write_text("# Design\n")  # exists, but outside the tree checked
    (tmp_path / "repo" / "docs").mkdir(parents=True)
    shutil.copy(REPO / "docs" / "design.md", tmp_path / "repo" / "docs" / "design.md")
    sample = tmp_path / "repo" / "docs" / "sample.md"
    sample.write_text("# Here\n\n[a](../../DESIGN.md) [b](missing.md) [c](#nowhere) [d](#here) "
                      "[e](design.md#evidence-model) [f](design.md#no-such) `[g](in-code.md)`\n")
    assert broken_links(sample, root=tmp_path / "repo") == [
        "../../DESIGN.md: outside the repository", "missing.md: no such file",
        "#nowhere: no heading with the anchor #nowhere", "design.md#no-such: no heading with the anchor #no-such",
    ]
    assert slug("6. What the agent said: `agentctl stderr` (sensitive)") == "6-what-the-agent-said-agentctl-stderr-sensitive"


def test_the_readme_links_the_design_inside_the_repository():
    readme = dict((link, target) for link, target, _ in local_targets(REPO / "README.md"))
    assert readme.get("docs/design.md") == REPO / "docs" / "design.md"
    assert not any("shared" in link for link in readme), "the design is in the repository, not beside it"


def test_the_docs_index_lists_every_document_and_the_license():
    listed = {target for _, target, _ in local_targets(INDEX) if target is not None}
    expected = {p for p in DOCUMENTS if p != INDEX} | set((REPO / "docs").iterdir()) - {INDEX} | {REPO / "LICENSE"}
    assert sorted(map(_rel, expected - listed)) == [], "documents missing from docs/README.md"
    assert sorted(map(_rel, listed - expected)) == [], "docs/README.md lists what is not a document"


def test_no_document_says_agent_output_never_goes_upstream():
    # It does, on the upstream's explicit request (stderr_read); the tool tunnel carries tool arguments too.
    claims = [(_rel(p), m.group(0)) for p in DOCUMENTS
              for m in re.finditer(r"never (?:be )?(?:sent|sends?|goes|travels) upstream", p.read_text())]
    assert claims == []


def test_the_changelog_opens_with_unreleased_then_the_current_version():
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    sections = re.findall(r"^## \[([^\]]+)\]", (REPO / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert sections[:2] == ["Unreleased", version]


def test_contributing_explains_each_switch_of_the_quick_loop_and_each_one_is_real():
    contributing = (REPO / "CONTRIBUTING.md").read_text()
    readers = [p.read_text() for p in (REPO / "tests").rglob("*.py")] + [(REPO / ".ci" / "run").read_text()]
    for name in SWITCHES:
        assert f"`{name}" in contributing, f"CONTRIBUTING.md does not explain {name}"
        assert any(name in text for text in readers), f"{name} is documented but nothing reads it"


def test_every_repository_path_contributing_names_exists():
    # A git-ignored directory (a cache .ci/run fills) is no repository path, whether or not it exists here.
    ignored = {line.strip().strip("/") for line in (REPO / ".gitignore").read_text().splitlines()
               if line.strip().endswith("/")}
    top = {p.name for p in REPO.iterdir()} - ignored
    named = [span.strip("`") for span in CODE_SPAN.findall(FENCE.sub("", (REPO / "CONTRIBUTING.md").read_text()))]
    paths = [n for n in named if re.fullmatch(r"[\w.-]+/[\w./-]*", n) and n.split("/")[0] in top]
    assert paths, "the document names paths of the repository"
    assert [p for p in paths if not (REPO / p).exists()] == []
