"""A page checked in a real browser: headless Chromium from Debian's packages.

``check_page(page)`` loads ``page`` inside a small probe page (an iframe; file access between
the two is allowed by a flag) and asks Chromium for the probe's DOM once everything has
loaded: the probe writes what the browser laid out (marks with a size, their kinds, the tips,
the text) into attributes of its own body. Console messages of either page are read from
Chromium's log on stderr: the timeline page has no script, so any console line is an error
(a blocked resource, a parse error, ...). No network: every flag that makes Chromium call
home is off, and the pages are local files.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
    "--allow-file-access-from-files",
    "--virtual-time-budget=5000",
)
CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\]? ?(?P<text>.*)$", re.M)

PROBE = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>
<iframe id="page" src="{src}" style="width:{width}px;height:900px;border:0"></iframe>
<script>
const frame = document.getElementById("page");
frame.addEventListener("load", () => {{
  const doc = frame.contentDocument;
  const marks = [...doc.querySelectorAll(".mark")];
  const drawn = marks.filter(m => {{
    const r = m.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  }});
  const tips = marks.filter(m => {{
    const tip = m.querySelector(".tip");
    return tip && tip.textContent.trim() && getComputedStyle(tip).display === "none";
  }});
  const body = document.body;
  body.setAttribute("data-marks", String(marks.length));
  body.setAttribute("data-drawn", String(drawn.length));
  body.setAttribute("data-tips", String(tips.length));
  body.setAttribute("data-kinds", [...new Set(drawn.map(m => m.dataset.kind))].sort().join(" "));
  body.setAttribute("data-lanes", String(doc.querySelectorAll(".lane").length));
  body.setAttribute("data-rows", String(doc.querySelectorAll("tbody tr").length));
  body.setAttribute("data-text", doc.body.innerText.slice(0, 2000));
  const root = doc.documentElement, axis = doc.querySelector(".axis");
  body.setAttribute("data-overflow", String(root.scrollWidth - root.clientWidth));
  body.setAttribute("data-view", String(root.clientWidth));
  body.setAttribute("data-axis", String(axis ? Math.round(axis.getBoundingClientRect().width) : 0));
  body.setAttribute("data-done", "1");
}});
</script></body></html>
"""


@dataclass(frozen=True)
class PageCheck:
    done: bool
    marks: int
    drawn: int
    tips: int
    kinds: frozenset[str]
    lanes: int
    rows: int
    text: str
    console: tuple[str, ...]
    overflow: int = -1  # px the page is wider than the frame (0: no horizontal scroll)
    view: int = -1  # the frame's width in px
    axis: int = -1  # the drawn time axis's width in px


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _attribute(dom: str, name: str) -> str:
    found = re.search(rf'<body[^>]*\bdata-{name}="([^"]*)"', dom)
    return html.unescape(found.group(1)) if found else ""


def check_page(
    page: Path, chromium: str | None = None, timeout: float = 90, width: int = 1400
) -> PageCheck:
    binary = chromium or find_chromium()
    if binary is None:
        raise RuntimeError("chromium is not installed")
    with tempfile.TemporaryDirectory(prefix="ar-chromium-") as scratch:
        probe = Path(scratch) / "probe.html"
        probe.write_text(PROBE.format(src=html.escape(page.resolve().as_uri()), width=width))
        done = subprocess.run(
            [binary, *FLAGS, f"--user-data-dir={scratch}/profile", "--dump-dom", probe.as_uri()],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    dom = done.stdout

    def number(name: str) -> int:
        value = _attribute(dom, name)
        return int(value) if value.isdigit() else -1

    return PageCheck(
        done=_attribute(dom, "done") == "1",
        marks=number("marks"),
        drawn=number("drawn"),
        tips=number("tips"),
        kinds=frozenset(_attribute(dom, "kinds").split()),
        lanes=number("lanes"),
        rows=number("rows"),
        text=_attribute(dom, "text"),
        console=tuple(m.group("text") for m in CONSOLE.finditer(done.stderr)),
        overflow=number("overflow"),
        view=number("view"),
        axis=number("axis"),
    )
