"""The soak itself (issue 11): two real OpenCode processes on one DB, the real daemon, many
sessions at once, a seeded fault per turn, and chaos at seeded moments; then the checker.

``Soak(...).run()`` is shared by ``bench/soak.py`` (10 minutes, the figures) and the e2e test
(about a minute). Process A's bridge talks to the daemon through a ``SocketProxy`` (so its
socket can be cut mid-line), process B's directly (B is the one restarted). Each lane (one root
session) draws its faults from its own ``Random(seed, lane)``, so a seed gives the same faults
per lane whatever the machine's speed; only how many turns fit in the time varies.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from daemon_process import DaemonProcess, wait_until
from fake_faults import install as install_faults
from fake_loops import install as install_loops
from fake_provider import FakeProvider
from fake_soak import install as install_soak
from fake_subagents import install as install_subagents
from fake_unattended import install as install_unattended
from opencode import OpenCodeHome, OpenCodeServer
from soak_chaos import SocketProxy
from soak_checks import Floor, Observed, Violation, check, check_floor, figures, table
from soak_observe import budget_limits, provider_continuations, read_opencode, read_store
from soak_plan import Fault, draw, first_draws, lane_rng, menu
from soak_turns import Lane, Process, Soaking, play, warm_up

from opencode_autoretry.config.settings import resolve
from opencode_autoretry.decisions.policy import load_policy

STALL_TIMEOUT = 8.0  # long enough that a loaded machine's slow step is not a stall
#: Interruptions retried after 1 s, a disconnect after 3 s: room for a user's message in it.
SOAK_CONFIG = f"stall_timeout = {STALL_TIMEOUT}\n" + "\n".join(
    f"[budgets.{group}]\ninitial_delay = {delay}\nmax_delay = {delay}\n"
    for group, delay in (("disconnect", 3.0), ("timeout", 1.0), ("stream", 1.0),
                         ("server", 1.0), ("rate_limit", 1.0), ("unknown", 1.0))
)


@dataclass(frozen=True)
class SoakOptions:
    seed: int
    seconds: float
    lanes: int = 8
    short: bool = False  # leave out the faults OpenCode itself retries for a minute
    daemon_kills: int = 2
    opencode_restarts: int = 1
    socket_cuts: int = 2
    leave_out: frozenset[str] = frozenset()  # faults an older OpenCode handles otherwise

    @property
    def faults(self) -> tuple[Fault, ...]:
        return tuple(f for f in menu(self.short) if f.name not in self.leave_out)


#: A normal run: the 35 s e2e soak plays 39 to 111 turns on 8 lanes (one turn per 2.5 to 7
#: lane-seconds), the 10-minute one 989 on 10 (one per 6). The floor allows one per 12.
LANE_SECONDS_PER_TURN = 12.0
#: Every lane finishes a turn per 15 s at least (a stall turn: 8 s of silence, the abort, the
#: continuation), two at most counted: the families of those first draws are the floor's.
SECONDS_PER_SURE_TURN = 15.0


def floor_of(options: SoakOptions) -> Floor:
    """What a run of ``options`` must at least do; below it, "too little happened"."""
    sure = max(1, min(2, int(options.seconds // SECONDS_PER_SURE_TURN)))
    drawn = first_draws(options.seed, options.lanes, options.faults, sure)
    families: dict[str, int] = {}
    for fault in drawn:
        families[fault.expect.value] = families.get(fault.expect.value, 0) + 1
    chaos = {"daemon SIGKILLs survived": options.daemon_kills,
             "OpenCode restarts survived": options.opencode_restarts,
             "bridge sockets cut mid-line": options.socket_cuts}
    turns = max(len(drawn), int(options.lanes * options.seconds / LANE_SECONDS_PER_TURN))
    return Floor(turns=turns, families=families, chaos=chaos)


@dataclass
class SoakResult:
    observed: Observed
    violations: list[Violation]
    chaos: dict[str, int]
    rows: list[tuple[str, str]] = field(default_factory=list)

    @property
    def table(self) -> str:
        return table(self.rows)


class Soak:
    def __init__(self, binary: Path, home: OpenCodeHome, provider: FakeProvider,
                 options: SoakOptions, workdir: Path) -> None:
        self.binary, self.home, self.provider, self.options = binary, home, provider, options
        self.sockdir = Path(tempfile.mkdtemp(prefix="ar-soak-", dir="/tmp"))  # sun_path ≤ 107
        socket = self.sockdir / "daemon.sock"
        self.daemon = DaemonProcess(workdir / "autoretry", socket,
                                    home.data_dir / "opencode.db", SOAK_CONFIG)
        self.proxy = SocketProxy(self.sockdir / "proxy.sock", socket)
        self.processes: list[Process] = []
        self.chaos = {"daemon SIGKILLs survived": 0, "OpenCode restarts survived": 0,
                      "bridge sockets cut mid-line": 0}
        self.problems: list[Violation] = []  # harness-level: a turn that never settled...
        self.exits: list[int] = []
        self.deadline = 0.0
        self.soaking: Soaking | None = None
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- set-up

    def _start_server(self, socket: Path) -> OpenCodeServer:
        mark = len(self.daemon.lines())
        server = OpenCodeServer.start(self.binary, self.home, {"AUTORETRY_SOCKET": str(socket)})
        server.ok("GET", "/path")  # boots the instance, which loads the bridge
        self.daemon.wait_log("connected: pid", 60, after=mark)
        return server

    def _set_up(self) -> list[Lane]:
        for install in (install_faults, install_loops, install_soak, install_subagents,
                        install_unattended):
            install(self.provider)
        self.daemon.start()
        self.proxy.start()
        for name, socket in (("A", self.proxy.listen), ("B", self.daemon.socket)):
            self.processes.append(Process(name, socket, self._start_server(socket)))
        return [
            Lane(i, self.processes[i % 2].server.create_session(title=f"soak {i}")["id"],
                 self.processes[i % 2])
            for i in range(self.options.lanes)
        ]

    # ----------------------------------------------------------------- lanes

    def _lane(self, lane: Lane, soaking: Soaking) -> None:
        rng = lane_rng(self.options.seed, lane.index)
        faults = self.options.faults
        turn = 0
        while time.monotonic() < self.deadline:
            fault = draw(rng, faults)
            tag = f"t{lane.index}x{turn}"
            turn += 1
            try:
                with lane.process.gate.turn():
                    play(soaking, lane, tag, fault)
            except AssertionError as exc:  # a bounded wait ran out: that turn is reported
                with self._lock:
                    self.problems.append(Violation("turn never settled", tag, str(exc)[:300]))
                return

    # ----------------------------------------------------------------- chaos

    def _moments(self, rng: random.Random, began: float) -> list[tuple[float, str]]:
        span = (began + 4.0, self.deadline - 4.0)
        options = self.options
        events = (["kill"] * options.daemon_kills + ["restart"] * options.opencode_restarts
                  + ["cut"] * options.socket_cuts)
        return sorted((rng.uniform(*span), name) for name in events)

    def _chaos(self, began: float) -> None:
        rng = random.Random(f"{self.options.seed}:chaos")
        for at, name in self._moments(rng, began):
            time.sleep(max(0.0, at - time.monotonic()))  # a seeded random moment, not a wait
            if name == "kill":
                self._kill_daemon(rng.uniform(0.3, 2.5))
            elif name == "restart":
                self._restart_opencode(self.processes[1])
            else:
                self._cut_socket()

    def _kill_daemon(self, down_s: float) -> None:
        self._note_exit()
        self.daemon.kill()
        time.sleep(down_s)  # how long the daemon stays down: the gap to look back over
        self.daemon.start()
        self.chaos["daemon SIGKILLs survived"] += 1

    def _note_exit(self) -> None:
        process = self.daemon.process
        if process is not None and process.poll() is not None:  # it died on its own
            self.exits.append(process.returncode)
            self.daemon.start()

    def _restart_opencode(self, process: Process) -> None:
        if not process.gate.hold(240):
            self.problems.append(Violation("restart", process.name, "turns did not drain"))
        try:
            process.server.stop()
            process.server = self._start_server(process.socket)
            if self.soaking is not None:
                warm_up(self.soaking, process)  # a restarted OpenCode is a fresh one
            self.chaos["OpenCode restarts survived"] += 1
        finally:
            process.gate.release()

    def _cut_socket(self) -> None:
        if self.proxy.cut(30):
            self.chaos["bridge sockets cut mid-line"] += 1
        else:
            self.problems.append(Violation("socket cut", "proxy", "no bytes within 30 s"))

    # ----------------------------------------------------------------- run

    def run(self) -> SoakResult:
        try:
            lanes = self._set_up()
            soaking = Soaking(self.daemon, self.provider, self.home.data_dir / "opencode.db",
                              STALL_TIMEOUT)
            self.soaking = soaking
            for process in self.processes:
                warm_up(soaking, process)
            began = time.monotonic()
            self.deadline = began + self.options.seconds
            threads = [threading.Thread(target=self._lane, args=(lane, soaking), daemon=True)
                       for lane in lanes]
            chaos = threading.Thread(target=self._chaos, args=(began,), daemon=True)
            for thread in (*threads, chaos):
                thread.start()
            chaos.join()
            for thread in threads:
                thread.join()
            self._quiesce(lanes)
            return self._result(soaking)
        finally:
            self._tear_down()

    def _quiesce(self, lanes: list[Lane]) -> None:
        """Every session idle and no open injection: nothing more can happen to the turns."""
        self._note_exit()

        def quiet() -> bool:
            view = self.daemon.store()
            try:
                if view.open_injections():
                    return False
            finally:
                view.close()
            return not any(
                (lane.process.server.ok("GET", "/session/status") or {}).get(lane.session)
                for lane in lanes)

        try:
            wait_until(quiet, 60, "every session idle, no retry open", every=0.25)
        except AssertionError as exc:
            self.problems.append(Violation("not quiet at the end", "soak", str(exc)[:300]))
        code = self.daemon.stop()
        if code is not None:
            self.exits.append(code)
        # SIGTERM refused, or a traceback: the fault with the log's excerpt, to study it from.
        self.problems += [Violation("daemon teardown", "daemon log", fault[:3000])
                          for fault in self.daemon.teardown_faults()]

    def _result(self, soaking: Soaking) -> SoakResult:
        sessions, messages = read_opencode(soaking.opencode_db)
        decisions, injections = read_store(self.daemon.home / "autoretry.db")
        settings = resolve(environ={}, config_path=self.daemon.config)
        limits, groups, cap = budget_limits(load_policy(settings.policy))
        observed = Observed(
            plan=list(soaking.plan), sessions=sessions, messages=messages, decisions=decisions,
            injections=injections, provider_continuations=provider_continuations(
                self.provider.requests()),
            daemon_exits=self.exits,
            daemon_tracebacks=sum("Traceback" in line for line in self.daemon.lines()),
            group_limits=limits, interruption_groups=groups, interruption_cap=cap,
        )
        observed = _only_soak_sessions(observed, {p.session_id for p in soaking.plan})
        chaos = {**self.chaos, **soaking.notes}
        least = floor_of(self.options)
        violations = [*self.problems, *check(observed), *check_floor(observed.plan, chaos, least)]
        result = SoakResult(observed, violations, chaos)
        families = ", ".join(f"{name} {n}" for name, n in sorted(least.families.items()))
        result.rows = [*figures(observed, violations, result.chaos),
                       ("floor (too little below it)", f"{least.turns} turns; {families}")]
        return result

    def _tear_down(self) -> None:
        for process in self.processes:
            process.server.stop()
        self.proxy.close()
        self.daemon.stop()
        shutil.rmtree(self.sockdir, ignore_errors=True)


def _only_soak_sessions(observed: Observed, roots: set[str]) -> Observed:
    """OpenCode's DB is shared with the other e2e tests of a pytest session: keep this soak's
    sessions only (its roots and their children)."""
    keep = roots | {s.id for s in observed.sessions if s.parent_id in roots}
    return replace(
        observed,
        sessions=[s for s in observed.sessions if s.id in keep],
        messages=[m for m in observed.messages if m.session_id in keep],
        decisions=[d for d in observed.decisions if d.session_id in keep],
        injections=[i for i in observed.injections if i.session_id in keep],
    )
