"""Argument checks shared by the commands: bad input is exit 2 with one line, never a traceback.

Found by fuzzing the CLI (issue 11): a session id or keyword that is not valid UTF-8 (a shell
passes raw bytes; Python keeps them as surrogate escapes) crashed SQLite's parameter binding,
and a day count beyond ``timedelta``'s range, or a non-ASCII digit like "²", crashed the
window arithmetic.
"""

from __future__ import annotations

import click

#: A hundred years: any larger window is a typo (and overflows ``timedelta``).
MAX_DAYS = 36_500
DAYS = click.IntRange(min=0, max=MAX_DAYS)


def utf8_text(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback: refuse text that cannot be encoded as UTF-8."""
    if value is None:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise click.BadParameter("is not valid UTF-8 text", param=param) from exc
    return value


def days_or_none(scope: str, param_hint: str = "DAYS|SESSION") -> int | None:
    """``scope`` as a day count when it is ASCII digits, else None (a session reference)."""
    if not (scope.isascii() and scope.isdigit()):
        return None
    if len(scope) > len(str(MAX_DAYS)) or int(scope) > MAX_DAYS:
        raise click.BadParameter(f"{scope[:12]} days is more than {MAX_DAYS}",
                                 param_hint=param_hint)
    return int(scope)
