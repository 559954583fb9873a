"""``[notify] urls``: Apprise URLs (``tgram://…``, ``discord://…``, ``json://host:port/…``),
checked when the config loads, shown and logged without their secrets (issue 23).

Apprise is an optional dependency (``pip install 'opencode-autoretry[apprise]'``; install.sh
installs it) and is imported only here and in the daemon's ``AppriseChannel``, only when a URL
is configured: a config without ``urls`` never loads it. The URL's parts beyond its scheme are
secrets (Telegram's bot token is its "host", Discord's webhook token its path, ``mailto://``
its user and password), so the only form of it ever shown is ``tgram://…``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

INSTALL_HINT = "pip install 'opencode-autoretry[apprise]' (install.sh installs it)"
LOGGER = "apprise"


class AppriseUrlError(ValueError):
    """A URL Apprise does not take, or Apprise missing; the message shows no secret."""


def shown(url: str) -> str:
    """``tgram://…``: the scheme only (everything after it may be a token)."""
    scheme = url.partition("://")[0] if "://" in url else ""
    safe = scheme.isascii() and scheme.replace("+", "").replace("-", "").isalnum()
    return f"{scheme}://…" if scheme and safe and len(scheme) <= 20 else "?://…"


def url_secrets(url: str) -> tuple[str, ...]:
    """The strings of ``url`` never to be logged or stored: itself, what follows its scheme,
    its host (a bot token), user, password, path segments and query."""
    rest = url.partition("://")[2]
    parts = urlsplit(url)
    found = [url, rest, parts.netloc, parts.query, parts.path, *parts.path.split("/"),
             *parts.netloc.replace("@", ":").split(":")]
    return tuple(s for s in found if len(s) > 3)


@contextlib.contextmanager
def quiet_apprise() -> Iterator[None]:
    """Apprise logs a URL it cannot parse, whole: silenced while we parse (our own error
    line names the scheme only)."""
    logger = logging.getLogger(LOGGER)
    before = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = before


def load_apprise() -> Any:
    """The ``apprise`` module, imported now (a URL is configured)."""
    try:
        import apprise
    except ImportError as exc:
        raise AppriseUrlError(f"needs the apprise package, which is not installed: "
                              f"{INSTALL_HINT}") from exc
    return apprise


def instantiate(url: str) -> Any:
    """Apprise's notifier for ``url``; AppriseUrlError when Apprise does not take it."""
    apprise = load_apprise()
    with quiet_apprise():
        plugin = apprise.Apprise.instantiate(url)
    if plugin is None:
        raise AppriseUrlError(f"{shown(url)} is not a URL Apprise supports (see "
                              "https://github.com/caronc/apprise/wiki for its schemes)")
    return plugin


def check_urls(raw: object, path: str) -> tuple[str, ...]:
    """The ``urls`` list, each URL parsed by Apprise once (imported only when there is one)."""
    if not isinstance(raw, list):
        raise AppriseUrlError(f"{path} must be a list of Apprise URLs, e.g. "
                              f'["tgram://TOKEN/CHAT"], got {type(raw).__name__}')
    for index, url in enumerate(raw):
        if not isinstance(url, str) or "://" not in url:
            what = shown(url) if isinstance(url, str) else type(url).__name__
            raise AppriseUrlError(f"{path}[{index}] must be an Apprise URL "
                                  f"(scheme://…), got {what}")
        try:
            instantiate(url)
        except AppriseUrlError as exc:
            raise AppriseUrlError(f"{path}[{index}]: {exc}") from None
    return tuple(raw)
