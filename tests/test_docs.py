"""The user's guide holds together: every relative link in README.md and docs/ names a file that exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _pages():
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_relative_link_names_a_file_that_exists():
    missing = []
    for page in _pages():
        for target in LINK.findall(page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                missing.append(f"{page.relative_to(ROOT)} -> {target}")
    assert missing == [], "links to files that do not exist: " + ", ".join(missing)


def test_the_readme_is_a_short_guide_that_starts_with_running_and_docs_describe_the_software():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move the details to docs/"
    heads = {line.strip("# ").strip(): i + 1 for i, line in enumerate(lines) if line.startswith("## ")}
    assert heads.get("Run on Kaggle", 999) <= 80 and heads.get("Run on Colab", 999) <= 80, heads
    # How the project was built ("the issue", "this session") is not what a user reads about; the software's own
    # names in backticks (a plan row `time.sessions`) are.
    said = [f"{page.relative_to(ROOT)}:{n}" for page in _pages()
            for n, line in enumerate(page.read_text().splitlines(), 1)
            if re.search(r"\b(issues?|sessions?)\b", re.sub(r"`[^`]*`", "", line), re.I)]
    assert said == [], said
