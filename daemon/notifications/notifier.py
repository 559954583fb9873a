"""Delivers notifications off the loop thread: one worker thread per channel, each fed by a
bounded queue. The loop only enqueues (``put_nowait``: microseconds, never the network); a
channel that hangs or fails delays nothing but its own later messages.

A delivery is tried at most twice (one retry) with ``timeout`` seconds per attempt; the result
goes back through ``report`` (the daemon's inbox), so the loop records it in the store. Errors
are scrubbed of the webhook's secrets (path, query) before they reach a log or ``report``.
"""

from __future__ import annotations

import contextlib
import html
import http.client
import json
import logging
import platform
import queue
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import Message
from typing import IO, Any, Protocol
from urllib.parse import urlsplit

from opencode_autoretry.notifications.apprise_urls import LOGGER as APPRISE_LOGGER
from opencode_autoretry.notifications.apprise_urls import AppriseUrlError, instantiate, shown
from opencode_autoretry.notifications.config import NotifyConfig, redact_url, scrub
from opencode_autoretry.notifications.events import Notification, ntfy_request, slack_body

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
QUEUE_SIZE = 64  # per channel; more waiting messages than this are dropped (and counted)
ATTEMPTS = 2  # the first try and at most one retry


class ChannelError(RuntimeError):
    """A delivery failed; the message is already free of secrets."""


class Channel(Protocol):
    name: str

    def deliver(self, note: Notification, timeout: float) -> None: ...


def desktop_program(which: Callable[[str], str | None] = shutil.which,
                    system: str | None = None) -> str | None:
    """``notify-send`` (Linux, BSD) or ``osascript`` (macOS), whichever this machine has."""
    if (system or platform.system()) == "Darwin":
        return which("osascript")
    return which("notify-send")


def _osa_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class DesktopChannel:
    name = "desktop"

    def __init__(self, program: str | None) -> None:
        self.program = program

    def argv(self, note: Notification) -> list[str]:
        if self.program is None:
            raise ChannelError("no notify-send or osascript on this machine")
        if self.program.endswith("osascript"):
            script = f"display notification {_osa_quote(note.summary)} " \
                     f"with title {_osa_quote(note.headline)}"
            return [self.program, "-e", script]
        # notify-send's body is markup (the summary is not): a session title holding
        # <a href=…> or <img src=…> rendered as a link or fetched an image (issue 20).
        return [self.program, "--app-name=autoretry", note.headline,
                html.escape(note.summary, quote=False)]

    def deliver(self, note: Notification, timeout: float) -> None:
        _run(self.argv(note), None, timeout, "desktop notifier")


class CommandChannel:
    name = "command"

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)

    def deliver(self, note: Notification, timeout: float) -> None:
        data = json.dumps(note.as_json()).encode()
        _run(self.argv, data, timeout, "command")


def _run(argv: list[str], stdin: bytes | None, timeout: float, what: str) -> None:
    program = argv[0].rsplit("/", 1)[-1]  # its arguments may carry tokens: never shown
    try:
        done = subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ChannelError(f"{what} {program} timed out after {timeout:g} s") from exc
    except OSError as exc:
        raise ChannelError(f"{what} {program} could not start: {exc.strerror}") from exc
    if done.returncode != 0:
        raise ChannelError(f"{what} {program} exited with status {done.returncode}")


class WebhookChannel:
    name = "webhook"

    def __init__(self, url: str, fmt: str = "json") -> None:
        self.url = url
        self.format = fmt
        self.shown = redact_url(url)

    def request(self, note: Notification) -> tuple[str, dict[str, object]]:
        if self.format == "slack":
            return self.url, slack_body(note)
        if self.format == "ntfy":
            return ntfy_request(note, self.url)
        return self.url, note.as_json()

    def deliver(self, note: Notification, timeout: float) -> None:
        url, body = self.request(note)
        request = urllib.request.Request(
            url, data=json.dumps(body).encode(), method="POST",
            headers={"content-type": "application/json", "user-agent": "opencode-autoretry"},
        )
        secrets = (self.url, url, *NotifyConfig(webhook=self.url).secrets())
        deadline = _Deadline()
        timer = threading.Timer(timeout, deadline.expire)
        timer.daemon = True
        timer.start()
        try:
            with _opener(url, deadline).open(request, timeout=timeout) as response:
                response.read(65536)
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                raise ChannelError(f"webhook {self.shown} answered a redirect (HTTP "
                                   f"{exc.code}), which is not followed") from None
            raise ChannelError(f"webhook {self.shown} answered HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            if deadline.expired or isinstance(reason, TimeoutError) or "timed out" in str(reason):
                raise ChannelError(f"webhook {self.shown} timed out after {timeout:g} s") from None
            raise ChannelError(f"webhook {self.shown} failed: {scrub(str(reason), secrets)}") \
                from None
        finally:
            timer.cancel()


class _Deadline:
    """The wall-clock end of one attempt: at ``expire`` every socket the attempt opened is
    shut down, which ends a blocked read. The socket timeout alone is per operation, so a
    server sending a byte a second kept a 1 s attempt going for 8.8 s (issue 20)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.expired = False

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                self._shut(sock)

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        # socket.socket's own shutdown, also for a TLS socket: SSLSocket.shutdown would drop
        # its SSL object under the reading thread's feet.
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


#: The loggers that may write an Apprise URL's parts: Apprise's own, and the HTTP client's
#: request lines (Telegram's bot token is in its path).
SCRUBBED_LOGGERS = (APPRISE_LOGGER, "urllib3.connectionpool")


class _Scrubbed(logging.Filter):
    """On Apprise's logger: its lines reach the daemon's log without the URLs' secrets."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = scrub(record.getMessage(), self.secrets), None
        return True


class AppriseChannel:
    """``[notify] urls`` through Apprise (issue 23): one channel, every URL tried on each
    event. Apprise is imported when the first event is delivered, on this channel's worker
    thread; each URL's failure is named by its scheme only (``tgram://…``)."""

    name = "apprise"

    def __init__(self, urls: Sequence[str]) -> None:
        self.urls = tuple(urls)
        self._secrets = NotifyConfig(urls=self.urls).secrets()
        self._plugins: list[Any] | None = None

    def plugins(self) -> list[Any]:
        if self._plugins is None:
            for name in SCRUBBED_LOGGERS:  # a filter applies to its own logger's lines only
                logger = logging.getLogger(name)
                found = [f for f in logger.filters if isinstance(f, _Scrubbed)]
                scrubbed = found[0] if found else _Scrubbed()
                scrubbed.secrets.update(self._secrets)
                if not found:
                    logger.addFilter(scrubbed)
            try:
                self._plugins = [instantiate(url) for url in self.urls]
            except AppriseUrlError as exc:  # checked at load: only if apprise went away since
                raise ChannelError(f"apprise: {exc}") from None
        return self._plugins

    def deliver(self, note: Notification, timeout: float) -> None:
        failed = []
        body = f"{note.summary}\n{note.resume}"
        for url, plugin in zip(self.urls, self.plugins(), strict=True):
            plugin.socket_connect_timeout = plugin.socket_read_timeout = timeout
            try:
                ok = bool(plugin.notify(body=body, title=note.headline))
            except Exception as exc:  # an Apprise plugin bug: named, never its message
                ok = False
                log.debug("apprise %s raised %s", shown(url), type(exc).__name__)
            if not ok:
                failed.append(shown(url))
        if failed:
            raise ChannelError(f"apprise: {', '.join(failed)} failed "
                               f"({len(failed)} of {len(self.urls)} URLs)")


def _http_handlers(deadline: _Deadline) -> list[urllib.request.BaseHandler]:
    """HTTP and HTTPS only (no ftp:, file: or data:), each connection watched by
    ``deadline``."""

    class Http(http.client.HTTPConnection):
        def connect(self) -> None:
            super().connect()
            deadline.watch(self.sock)

    class Https(http.client.HTTPSConnection):
        def connect(self) -> None:
            super().connect()
            deadline.watch(self.sock)

    class HttpHandler(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(Http, req)

    context = ssl.create_default_context()

    class HttpsHandler(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(Https, req, context=context)

    return [HttpHandler(), HttpsHandler(context=context)]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not a delivery: followed, it could send the event (and its
    session's title) to any host by any scheme and be recorded as sent (issue 20)."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int,
                         msg: str, headers: Message, newurl: str) -> None:
        return None


def _opener(url: str, deadline: _Deadline) -> urllib.request.OpenerDirector:
    """The environment's proxies, except for a loopback URL (a local relay or a test)."""
    proxies: dict[str, str] | None = {} if urlsplit(url).hostname in LOOPBACK_HOSTS else None
    opener = urllib.request.OpenerDirector()
    handlers: list[urllib.request.BaseHandler] = [
        urllib.request.ProxyHandler(proxies),
        *_http_handlers(deadline),
        _NoRedirect(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
    ]
    for handler in handlers:
        opener.add_handler(handler)
    return opener


def cleartext_warning(config: NotifyConfig) -> str | None:
    """A warning when the webhook sends its events (session titles, directories) and its
    secret path in clear text to another machine."""
    parts = urlsplit(config.webhook or "")
    if parts.scheme != "http" or parts.hostname in LOOPBACK_HOSTS:
        return None
    return (f"notify.webhook {redact_url(config.webhook or '')} is plain http:// to another "
            "host: its events and secret path cross the network unencrypted (use https://)")


def build_channels(config: NotifyConfig, program: str | None = None) -> list[Channel]:
    channels: list[Channel] = []
    if config.desktop:
        channels.append(DesktopChannel(program if program is not None else desktop_program()))
    if config.command:
        channels.append(CommandChannel(config.command))
    if config.webhook:
        channels.append(WebhookChannel(config.webhook, config.webhook_format))
    if config.urls:
        channels.append(AppriseChannel(config.urls))
    return channels


@dataclass(frozen=True)
class DeliveryResult:
    """What a worker reports for one notification on one channel (an inbox item)."""

    record_id: int | None
    channel: str
    ok: bool
    attempts: int
    error: str | None
    delivered_at: datetime
    seconds: float  # from the enqueue to the end of the last attempt


def deliver_once(channel: Channel, note: Notification, timeout: float,
                 attempts: int = ATTEMPTS) -> tuple[bool, int, str | None]:
    """Try ``channel`` up to ``attempts`` times; (ok, attempts used, last error)."""
    error: str | None = None
    for attempt in range(1, attempts + 1):
        try:
            channel.deliver(note, timeout)
            return True, attempt, None
        except ChannelError as exc:
            error = str(exc)
        except Exception as exc:  # a channel bug must not kill its worker
            error = f"{channel.name}: {type(exc).__name__}"
    return False, attempts, error


class _Worker:
    def __init__(self, channel: Channel, timeout: float,
                 report: Callable[[DeliveryResult], None]) -> None:
        self.channel = channel
        self._timeout = timeout
        self._report = report
        self.queue: queue.Queue[tuple[int | None, Notification, float] | None] = queue.Queue(
            QUEUE_SIZE)
        self.thread = threading.Thread(target=self._run, name=f"notify-{channel.name}",
                                       daemon=True)

    def _run(self) -> None:
        while True:
            job = self.queue.get()
            if job is None:
                return
            record_id, note, queued = job
            ok, attempts, error = deliver_once(self.channel, note, self._timeout)
            result = DeliveryResult(record_id, self.channel.name, ok, attempts, error,
                                    datetime.now(tz=UTC), time.monotonic() - queued)
            if not ok:
                log.warning("notification %s via %s failed after %d attempt(s): %s",
                            note.event, self.channel.name, attempts, error)
            try:
                self._report(result)
            except Exception:
                log.exception("could not report a delivery result")


class Notifier:
    """The channels' workers. ``enqueue`` is the only call the loop makes."""

    def __init__(self, channels: Sequence[Channel], timeout: float,
                 report: Callable[[DeliveryResult], None]) -> None:
        self._workers = [_Worker(c, timeout, report) for c in channels]
        self.dropped = 0

    @property
    def channel_names(self) -> tuple[str, ...]:
        return tuple(w.channel.name for w in self._workers)

    def start(self) -> Notifier:
        for worker in self._workers:
            worker.thread.start()
        return self

    def enqueue(self, record_ids: dict[str, int | None], note: Notification) -> list[str]:
        """Queue ``note`` on every channel in ``record_ids``; returns those that were full."""
        full = []
        queued = time.monotonic()
        for worker in self._workers:
            name = worker.channel.name
            if name not in record_ids:
                continue
            try:
                worker.queue.put_nowait((record_ids[name], note, queued))
            except queue.Full:
                self.dropped += 1
                full.append(name)
        return full

    def stop(self, timeout: float = 1.0) -> None:
        """Ask every worker to finish; a worker stuck in a delivery is left behind (daemon)."""
        for worker in self._workers:
            with contextlib.suppress(queue.Full):
                worker.queue.put_nowait(None)
        deadline = time.monotonic() + timeout
        for worker in self._workers:
            if worker.thread.is_alive():
                worker.thread.join(max(0.0, deadline - time.monotonic()))


def send_test(config: NotifyConfig, note: Notification,
              channels: Sequence[Channel] | None = None) -> list[tuple[str, bool, str | None]]:
    """``autoretry notify test``: deliver ``note`` on every channel, synchronously."""
    results = []
    for channel in channels if channels is not None else build_channels(config):
        ok, _, error = deliver_once(channel, note, config.timeout)
        results.append((channel.name, ok, error))
    return results


def start_notifier(config: NotifyConfig, report: Callable[[DeliveryResult], None],
                   program: str | None = None) -> Notifier | None:
    """The daemon's notifier (None without a channel); warns once about a missing desktop
    notifier, which then fails every delivery with a clear error instead of vanishing."""
    if not config.channels:
        return None
    warning = cleartext_warning(config)
    if warning:
        log.warning("%s", warning)
    channels = build_channels(config, program)
    for channel in channels:
        if isinstance(channel, DesktopChannel) and channel.program is None:
            log.warning("notify.desktop = true, but neither notify-send nor osascript is "
                        "installed: desktop notifications will fail (install libnotify-bin)")
    notifier = Notifier(channels, config.timeout, report).start()
    log.info("notifications: %s for %s", ", ".join(notifier.channel_names),
             ", ".join(sorted(config.events)) or "no event")
    return notifier
