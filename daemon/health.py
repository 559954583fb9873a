"""Doctor's summary line, kept fresh by the daemon for ``diagnose`` (issue 21).

Every ``RECORD_EVERY_S`` a thread of its own runs doctor's checks as ``diagnose`` would (the
process table, ``systemctl`` and a probe of the socket: never on the loop's thread) and keeps
the line with the digest of what they read; the heartbeat carries the latest
(``control.heartbeat_info``). ``diagnose`` prints it while it holds
(``diagnostics/doctor/recorded.py``), else runs the checks itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from opencode_autoretry.diagnostics.doctor.recorded import RECORD_EVERY_S

log = logging.getLogger(__name__)
FIRST_AFTER_S = 3.0


class DoctorLine:
    def __init__(
        self, compute: Callable[[], Mapping[str, Any]], every: float = RECORD_EVERY_S
    ) -> None:
        self._compute = compute
        self.every = every
        self._latest: Mapping[str, Any] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="doctor-line", daemon=True)
        self._failing = False

    def latest(self) -> Mapping[str, Any] | None:
        return self._latest

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1)  # a check in flight is not worth a slow stop

    def _run(self) -> None:
        # The first soon after the start, once the loop's first tick wrote the heartbeat the
        # checks read (one taken before it records a digest no later heartbeat matches).
        wait = min(FIRST_AFTER_S, self.every)
        while not self._stop.wait(wait):
            self.refresh()
            wait = self.every

    def refresh(self) -> None:
        try:
            self._latest = self._compute()
            self._failing = False
        except Exception:  # noqa: BLE001 - diagnose then runs the checks itself
            self._latest = None
            if not self._failing:
                log.warning("doctor's line for diagnose could not be computed", exc_info=True)
            self._failing = True
