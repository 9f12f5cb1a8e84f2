"""Every relative link in README.md and docs/*.md leads somewhere: the file
exists and, where the link names an #anchor, a heading of that file makes
it (as GitHub turns headings into anchors)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def anchors(path: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation
    but hyphens and underscores dropped, spaces as hyphens, -1, -2 for repeats."""
    seen: dict[str, int] = {}
    for line in _prose(path.read_text()):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        yield slug if n == 0 else f"{slug}-{n}"


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall("\n".join(_prose(page.read_text()))):  # a link's text may wrap
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            where = f"{page.relative_to(ROOT)}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and (dest.suffix != ".md" or anchor not in set(anchors(dest))):
                broken.append(f"{where} (no such heading)")
    assert broken == []


def test_the_checker_makes_github_s_anchors(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Calibration: how often the verdict is right\n## `max.in.flight=5` (2026-11-22)\n"
                    "### FLAKY and `--deflake`\n```\n# not a heading\n```\n## Notes\n## Notes\n")
    assert list(anchors(page)) == ["calibration-how-often-the-verdict-is-right", "maxinflight5-2026-11-22",
                                   "flaky-and---deflake", "notes", "notes-1"]
