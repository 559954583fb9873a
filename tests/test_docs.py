"""README.md and docs/*.md hold together (issue 24): every relative link points to a file that
exists (and to a heading that exists, when it names one), every page of docs/ is linked from
README, README opens with the two set-up commands, and the shell completion it documents works."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
#: A docs page named in plain text or a code block (README's config.toml comments name them).
MENTION = re.compile(r"(?<![\w/.])(docs/[\w.-]+\.md)(#[\w-]+)?")
FENCE = re.compile(r"^(```|~~~)")


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code (where a link is not a link)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of every heading of a Markdown page (a repeated one gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in prose(page.read_text(encoding="utf-8")).splitlines():
        if match := re.match(r"#{1,6} (.+)", line):
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken(page: Path, target: str) -> str | None:
    """Why a relative link of ``page`` is broken, None when it is not."""
    path, _, anchor = target.partition("#")
    file = (page.parent / path).resolve() if path else page
    if not file.exists():
        return f"{page.name}: {target}: no such file"
    if anchor and file.suffix == ".md" and anchor not in anchors(file):
        return f"{page.name}: {target}: no heading #{anchor} in {file.name}"
    return None


def test_slugs_are_githubs() -> None:
    assert slug("Notifications (`[notify]`)") == "notifications-notify"
    assert slug("`/autoretry` inside OpenCode") == "autoretry-inside-opencode"
    assert slug("Protocol (v1)") == "protocol-v1"


def test_every_relative_link_points_to_an_existing_file_and_heading() -> None:
    problems, checked = [], 0
    for page in PAGES:
        for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            checked += 1
            if why := broken(page, target):
                problems.append(why)
    assert problems == []
    assert checked > 30, f"only {checked} relative links found: is the link pattern right?"


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## A part\n", encoding="utf-8")
    assert broken(page, "#a-part") is None
    assert broken(page, "#title") is None
    assert broken(page, "#no-part") is not None
    assert broken(page, "missing.md") is not None


def test_every_docs_page_named_in_readme_exists() -> None:
    text = README.read_text(encoding="utf-8")
    named = MENTION.findall(text)
    assert named, "README names no page of docs/"
    problems = [why for path, anchor in named if (why := broken(README, path + anchor))]
    assert problems == []


def test_every_docs_page_is_linked_from_readme() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve()
              for t in LINK.findall(prose(README.read_text(encoding="utf-8")))}
    orphans = [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked]
    assert orphans == [], f"docs/ pages README does not link to: {orphans}"


def test_readme_opens_with_the_install_and_the_test_command() -> None:
    """The first block is ./install.sh; the block after the marker is what .ci/run runs (read
    with .ci/run's own awk program)."""
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```\w*\n(.*?)```", text, re.S)
    assert blocks[0].strip() == "./install.sh"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    program = re.search(r"awk '([^']+)' README\.md", ci)
    assert program, ".ci/run no longer extracts README's test command with awk"
    command = subprocess.run(["awk", program.group(1), str(README)], capture_output=True,
                             text=True, check=True).stdout.strip()
    assert command == blocks[1].strip()
    assert command.startswith("python3 -m venv .venv") and "-m pytest" in command
    assert text.index("./install.sh") < text.index("<!-- test-command -->") < text.index("## ")


def completion_variable() -> tuple[str, str]:
    """The console script's name and click's completion variable for it."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    (name,) = scripts
    return name, f"_{name.upper().replace('-', '_')}_COMPLETE"


def test_the_documented_bash_completion_line_is_the_entry_points() -> None:
    name, variable = completion_variable()
    line = f'eval "$({variable}=bash_source {name})"'
    assert line in README.read_text(encoding="utf-8")
    assert line in (DOCS / "install.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_documented_completion_scripts_are_printed(shell: str) -> None:
    name, variable = completion_variable()
    assert f"{variable}={shell}_source {name}" in (DOCS / "install.md").read_text(encoding="utf-8")
    script = Path(sys.executable).parent / name
    assert script.exists(), f"{script} is not installed (pip install -e .)"
    env = {**os.environ, variable: f"{shell}_source"}
    out = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"_{name}_completion" in out.stdout, out.stdout[:500]
    if shell == "bash":
        assert f"complete -o nosort -F _{name}_completion {name}" in out.stdout


def test_bash_completes_a_subcommand() -> None:
    """What the bash function asks for: ``autoretry con<TAB>`` -> ``config``."""
    name, variable = completion_variable()
    script = Path(sys.executable).parent / name
    env = {**os.environ, variable: "bash_complete", "COMP_WORDS": f"{name} config ",
           "COMP_CWORD": "2"}
    out = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert {"plain,check", "plain,path", "plain,show"} <= set(out.stdout.split())
