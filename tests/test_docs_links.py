"""Every relative link and #anchor in the Markdown resolves: the template's (README.md, docs/) and a generated
project's (its README and docs/ as baked, so their Jinja is rendered). External links are not fetched."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from .conftest import TEMPLATE, bake

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
CODE_SPAN = re.compile(r"(`+).*?\1")
# [text](target) and ![alt](target); the target may be in <...> and carry a "title".
INLINE_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")

# The bakes whose Markdown differs: the default, and each answer its README and docs/ test in Jinja.
BAKES = {
    "default": {},
    "databricks": {"platform": "databricks"},
    "stream_stream_join": {"stateful_operator": "stream_stream_join"},
    "custom_state": {"stateful_operator": "custom_state"},
    "deduplicated_count": {"stateful_operator": "deduplicated_count"},
    "real_time": {"source": "kafka", "sink": "kafka", "stateful_operator": "deduplication", "real_time": True},
}


def github_slug(heading: str) -> str:
    """The id GitHub gives a heading: its text lowercased, every character but letters, digits, spaces,
    hyphens and underscores dropped, spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading counts by its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    return "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines, fence = [], ""
    for number, line in enumerate(text.splitlines(), start=1):
        opening = FENCE.match(line)
        if fence:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                fence = ""
            continue
        if opening:
            fence = opening.group(1)
            continue
        lines.append((number, line))
    return lines


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings; a repeated slug gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        heading = HEADING.match(line)
        if not heading:
            continue
        slug = github_slug(heading.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        line = CODE_SPAN.sub("", line)  # a link inside `code` is text
        targets = [m.group(1) for m in INLINE_LINK.finditer(line)]
        definition = REFERENCE_DEFINITION.match(line)
        if definition:
            targets.append(definition.group(1))
        found += [(number, target.strip("<>")) for target in targets]
    return found


def broken_links(path: Path, root: Path) -> list[str]:
    """One line per link in `path` that does not resolve inside `root`: the file is missing, or the anchor
    names no heading of the Markdown file it points into."""
    broken = []
    for number, target in links(path):
        if SCHEME.match(target):  # http(s), mailto: not fetched
            continue
        file_part, _, anchor = target.partition("#")
        where = f"{path.relative_to(root)}:{number}: ({target})"
        resolved = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not resolved.is_relative_to(root.resolve()):
            broken.append(f"{where} points outside {root.name}")
        elif not resolved.exists():
            broken.append(f"{where} no such file")
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
            broken.append(f"{where} no heading #{anchor} in {resolved.name}")
    return broken


def markdown_files(root: Path, *names: str) -> list[Path]:
    return sorted(path for name in names for path in root.glob(name))


def test_the_templates_markdown_links_resolve() -> None:
    files = markdown_files(TEMPLATE, "README.md", "docs/**/*.md")
    assert len(files) > 1
    broken = [line for path in files for line in broken_links(path, TEMPLATE)]
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_readme_is_read_in_minutes() -> None:
    """At most 300 lines, its first screen the command CI runs (.ci/run: make test); the rest is in docs/."""
    readme = (TEMPLATE / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(readme) <= 300
    assert (TEMPLATE / ".ci" / "run").read_text().splitlines()[-1] == "make test"
    assert any(line.startswith("make test ") for line in readme[:20])


@pytest.mark.parametrize("answers", BAKES.values(), ids=BAKES.keys())
def test_a_generated_projects_markdown_links_resolve(tmp_path: Path, answers: dict[str, object]) -> None:
    project = bake(tmp_path, **answers)
    files = markdown_files(project, "*.md", "docs/**/*.md")
    assert {path.name for path in files} >= {"README.md", "state.md"}
    broken = [line for path in files for line in broken_links(path, project)]
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Sinks and exactly-once\n\n## Notes\n\n## Notes\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Top\n\n"
        "[ok](docs/page.md#sinks-and-exactly-once) [second notes](docs/page.md#notes-1) [self](#top)\n"
        "[gone](docs/missing.md) [no such heading](docs/page.md#sinks) [third notes](docs/page.md#notes-2)\n"
        "[outside](../elsewhere.md) [web](https://example.com/nothing#here)\n"
        "`[in code](nowhere.md)`\n\n"
        "```\n[in a fence](nowhere.md)\n```\n"
    )
    assert broken_links(readme, tmp_path) == [
        "README.md:4: (docs/missing.md) no such file",
        "README.md:4: (docs/page.md#sinks) no heading #sinks in page.md",
        "README.md:4: (docs/page.md#notes-2) no heading #notes-2 in page.md",
        "README.md:5: (../elsewhere.md) points outside " + tmp_path.name,
    ]


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("Connector JARs (Kafka, delta-spark)", "connector-jars-kafka-delta-spark"),
        ("Changing the state's schema", "changing-the-states-schema"),
        ("Latency: Kafka in, state, Kafka out", "latency-kafka-in-state-kafka-out"),
        ("`make test` and CI", "make-test-and-ci"),
        ("The `custom_state` operator", "the-custom_state-operator"),
        ("Stopping, and the progress line", "stopping-and-the-progress-line"),
    ],
)
def test_the_slug_is_githubs(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug
