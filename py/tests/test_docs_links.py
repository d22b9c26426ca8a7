"""Every documentation page is reachable from README.md, and every relative link resolves.

Starting at README.md, follows the relative Markdown links of every page reached (a link to a
directory reaches its README.md). A link must name an existing file or directory; every page of
docs/, py/README.md, CONTRIBUTING.md, CHANGELOG.md, LICENSE and every record in benchmarks/results/
must be reached. Also runs as a script: `python3 py/tests/test_docs_links.py` (exit status 1 on a
problem)."""
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Pages linked from the docs before their text is in the tree: a link to one of them is accepted
# until it exists; remove each name here once its page exists. Every page is in the tree now.
PENDING: frozenset = frozenset()

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def links_of(page: Path):
    """Relative link targets of a Markdown page (outside code blocks), without anchors."""
    text = FENCE.sub("", page.read_text())
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # http(s):, mailto:, an anchor on the same page
        yield target.split("#", 1)[0]


def crawl(root: Path = REPO, pending=frozenset(PENDING)):
    """(reached pages, broken links as 'page -> target') from root/README.md."""
    start = (root / "README.md").resolve()
    reached, broken, todo = {start}, [], [start]
    while todo:
        page = todo.pop()
        for target in links_of(page):
            dest = (page.parent / target).resolve()
            try:
                rel = dest.relative_to(root.resolve()).as_posix()
            except ValueError:  # outside the repository
                rel = str(dest)
            if dest.is_dir():
                reached.add(dest)
                dest = dest / "README.md"
                if not dest.is_file():
                    continue
            elif not dest.exists():
                if rel not in pending:
                    broken.append(f"{page.relative_to(root.resolve()).as_posix()} -> {target}")
                continue
            if dest not in reached:
                reached.add(dest)
                if dest.suffix == ".md":
                    todo.append(dest)
    return reached, broken


def required_pages(root: Path = REPO):
    pages = sorted((root / "docs").glob("*.md")) + sorted((root / "benchmarks" / "results").glob("*.md"))
    pages += [root / p for p in ("py/README.md", "CONTRIBUTING.md", "CHANGELOG.md", "LICENSE")]
    return [p for p in pages if p.exists()]


def problems(root: Path = REPO, pending=frozenset(PENDING)):
    reached, broken = crawl(root, pending)
    out = [f"broken link: {b}" for b in broken]
    out += [f"not reachable from README.md: {p.relative_to(root).as_posix()}"
            for p in required_pages(root) if p.resolve() not in reached]
    return out


def test_docs_reachable_and_links_resolve():
    import pytest

    if not (REPO / "README.md").is_file() or not (REPO / "docs").is_dir():
        pytest.skip("the repository's docs are not here (package installed without the repository)")
    found = problems()
    assert not found, "\n".join(found)


def test_the_check_catches_broken_and_unreachable_pages(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("[a](docs/a.md) [gone](docs/gone.md) [later](docs/later.md)\n"
                                        "```\n[in code](docs/b.md)\n```\n")
    (tmp_path / "docs" / "a.md").write_text("[back](../README.md) [web](https://example.com) [x](#top)\n")
    (tmp_path / "docs" / "b.md").write_text("only linked from a code block\n")
    found = problems(tmp_path, pending={"docs/later.md"})
    assert found == ["broken link: README.md -> docs/gone.md", "not reachable from README.md: docs/b.md"]


if __name__ == "__main__":
    found = problems()
    print("\n".join(found) if found else "docs: every page reachable from README.md, every link resolves")
    sys.exit(1 if found else 0)
