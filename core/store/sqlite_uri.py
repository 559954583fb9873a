"""PURE: the ``file:`` URI that opens an SQLite file read-only.

The path is percent-quoted: unquoted, a ``?`` or ``#`` in the state directory's name ended the
path early, so ``status`` failed and SQLite created a stray file named after the first part
(issue 20).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote


def readonly_uri(path: Path) -> str:
    """``file:/abs/path?mode=ro``, the path absolute and quoted."""
    return f"file:{quote(str(Path(path).absolute()))}?mode=ro"
