"""Each report command imports what it draws, and no more (issue 21).

Every command runs in a fresh interpreter against the seeded DB and store (this test process
has long imported everything), after one ``diagnose 0`` that builds the report index, so
``diagnose`` and ``trace`` read it warm as a user's second run does. Each must print its
report (a command that printed nothing, or failed, would import little), must not load the
daemon's libraries, the store's old wrapper or the parts a warm report does not use, and
must stay within a module budget: ``python -X importtime`` on the 1 M-message DB said where
the time goes (bench/README.md, "Report commands (issue 21)"). With a live daemon's heartbeat
carrying doctor's line, ``diagnose`` prints that line and imports no check, unless something
the checks read changed since.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from seeded_reports import Seeded, closed_seed, probe_env, process_env

#: What no report uses: the todo judge and its ~60 patterns (only the daemon judges todos).
TODO_JUDGE = ("opencode_autoretry.todos.continuation", "opencode_autoretry.todos.reply_intent")
#: Never imported by a report: the daemon and its libraries, the store's former wrapper
#: (sqlite-utils and its dateutil), the optional notifier.
NEVER = (
    *TODO_JUDGE,
    "apscheduler",
    "watchdog",
    "sqlite_utils",
    "dateutil",
    "apprise",
    "opencode_autoretry.daemon.loop",
    "opencode_autoretry.daemon.actions",
    # the other commands' modules: the CLI loads a command's module when it runs
    "opencode_autoretry.daemon.commands",
    "opencode_autoretry.daemon.lifecycle",
    "opencode_autoretry.daemon.setup",
    "opencode_autoretry.daemon.headless.command",
    "opencode_autoretry.plugin_bridge.commands",
    "tomllib",  # the probes run with no config file: nothing to parse
)
#: What ``diagnose`` on a warm index does not use: the classifier and its patterns (steps were
#: classified when the index was built), HTTP-date parsing (``retry_hint``'s, by way of the
#: classifier), pickle (its remembered steps are flat, memo_codec.py). ``trace`` still
#: classifies the steps its continuations answered.
WARM_INDEX = ("opencode_autoretry.decisions.classifier",
              "opencode_autoretry.decisions.retry_hint", "pickle")
#: What only a scan or an index build uses (their worker threads, the background build's
#: log): a report from a warm index starts neither.
SCAN_ONLY = ("concurrent.futures", "logging")
#: The retry policy's classes: a report reads decisions, it never takes one.
POLICY = ("opencode_autoretry.decisions.policy", "opencode_autoretry.decisions.budget")
#: diagnose's report and summary: trace windows its continuations without them.
DIAGNOSE = ("opencode_autoretry.diagnostics.diagnose", "opencode_autoretry.diagnostics.summary")
#: trace's report and the views only it draws: diagnose judges outcomes with
#: trace/outcome.py alone.
TRACE_VIEWS = ("opencode_autoretry.diagnostics.trace.report",
               "opencode_autoretry.diagnostics.todo_view",
               "opencode_autoretry.diagnostics.subagent_view",
               "opencode_autoretry.diagnostics.goal_view")
#: Doctor's checks (``diagnose``'s first line only: the other reports never run them).
DOCTOR = ("opencode_autoretry.diagnostics.doctor.checks", "psutil")
#: What trace does not use: it reads continuations, it takes no decision and draws no summary.
TRACE_UNUSED = (*DOCTOR, *SCAN_ONLY, *POLICY, *DIAGNOSE)

PROBE = """
import json, sys
from opencode_autoretry.cli.main import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def is_json(name: str) -> Callable[[str], bool]:
    return lambda out: json.loads(out)["report"] == name


def has(*lines: str) -> Callable[[str], bool]:
    return lambda out: all(line in out for line in lines)


def run_probe(
    seeded: Seeded, home: Path, args: Sequence[str], store: Path | None = None
) -> tuple[str, list[str]]:
    env = process_env(home)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "--db", str(seeded.db), "--store",
         str(store or seeded.store), *args],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )
    probe = json.loads(done.stderr.strip().splitlines()[-1])
    assert probe["code"] in (0, None), f"{args} exited {probe['code']}: {done.stderr[-2000:]}"
    return done.stdout, probe["modules"]


def pulled(modules: Sequence[str], heavy: Sequence[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in heavy))


# (arguments, what the output must show, modules it must not import, module budget). Each
# budget is what was imported on the seeded DB plus ~8 % (in brackets; before issue 21's
# cuts: diagnose 403, diagnose --json 340, trace 309, errors 279, timeline 283; the CLI loads
# only the invoked command's module since; text ``diagnose`` was 342 until its summary was
# drawn without rich, which a typical summary no longer imports: summary/drawing.py).
CASES = [
    (["diagnose", "0"], has("autoretry doctor: ", "autoretry diagnose — all time",
                            "What autoretry did"),
     (*WARM_INDEX, *TRACE_VIEWS, "rich"), 212),  # [196]
    (["diagnose", "0", "--json"], is_json("diagnose"),
     (*WARM_INDEX, *DOCTOR, *SCAN_ONLY, *POLICY, *TRACE_VIEWS, "email.utils", "subprocess"),
     210),  # [194]
    (["diagnose"], has("autoretry doctor: ", "autoretry diagnose — last 7 days"),
     (*WARM_INDEX, *TRACE_VIEWS, "rich"), 212),  # [196]
    (["diagnose", "--json"], is_json("diagnose"),
     (*WARM_INDEX, *DOCTOR, *SCAN_ONLY, *POLICY, *TRACE_VIEWS, "email.utils", "subprocess"),
     210),  # [194]
    (["trace", "0"], has("autoretry trace — all time", "Continuations:"), TRACE_UNUSED,
     200),  # [185]
    (["trace", "0", "--json"], is_json("trace"), TRACE_UNUSED, 197),  # [182]
    (["trace"], has("autoretry trace — last 7 days"), TRACE_UNUSED, 197),  # [182]
    (["errors"], has("The 10 newest errored steps", "autoretry timeline ses_"), DOCTOR,
     170),  # [157]
    (["errors", "--json"], is_json("errors"), DOCTOR, 170),  # [157]
]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    """The seeded DB closed (the shared fixture keeps its writer open)."""
    return closed_seed(tmp_path_factory.mktemp("oc"))


@pytest.fixture(scope="module")
def warm(seeded: Seeded, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home of its own, and the report index built (``diagnose 0``, as a user's first run)."""
    home = tmp_path_factory.mktemp("home")
    out, _ = run_probe(seeded, home, ["diagnose", "0"])
    assert "What autoretry did" in out
    return home


@pytest.mark.parametrize(("args", "shows", "unused", "budget"), CASES,
                         ids=[" ".join(c[0]) for c in CASES])
def test_a_report_imports_what_it_draws(
    seeded: Seeded, warm: Path, args: list[str], shows: Callable[[str], bool],
    unused: Sequence[str], budget: int,
) -> None:
    out, modules = run_probe(seeded, warm, args)
    assert shows(out), f"{args} did not print its report:\n{out[:2000]}"
    assert pulled(modules, (*NEVER, *unused)) == []
    assert len(modules) <= budget, f"{args}: {len(modules)} modules (budget {budget})"


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_timeline_imports_what_it_draws(seeded: Seeded, warm: Path, as_json: bool) -> None:
    sid = seeded.sessions["main"]
    out, modules = run_probe(seeded, warm, ["timeline", sid, *(["--json"] if as_json else [])])
    assert (json.loads(out)["session"]["id"] == sid) if as_json else (sid in out)
    assert pulled(modules, (*NEVER, *DOCTOR)) == []
    assert len(modules) <= 175, f"timeline: {len(modules)} modules (budget 175)"  # [161]


@pytest.fixture()
def live_daemon_store(
    seeded: Seeded, warm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, dict[str, str]]]:
    """A copy of the store whose heartbeat is a live daemon's (this process) carrying doctor's
    line as ``daemon/health.py`` records it, computed in this process's copy of the probes'
    environment."""
    from opencode_autoretry.cli.context import AppContext
    from opencode_autoretry.diagnostics.doctor.report import summary_record
    from opencode_autoretry.store.database import Store

    for name in [k for k in os.environ if k.startswith(("AUTORETRY_", "OPENCODE_"))]:
        monkeypatch.delenv(name)
    for name, value in probe_env(warm).items():
        monkeypatch.setenv(name, value)
    store = tmp_path / "autoretry.db"
    shutil.copy(seeded.store, store)
    now = datetime.now(tz=UTC)
    info = {"started": now.isoformat(), "stopping": False, "bridges": [], "lines": {}}
    with closing(Store.open(store)) as writer:  # open throughout, as the daemon holds it
        writer.beat(now, os.getpid(), info)
        record = summary_record(AppContext({"opencode_db": seeded.db, "store": store}, None),
                                now)
        writer.beat(now, os.getpid(), {**info, "doctor": record})
        yield store, record


def test_diagnose_prints_the_live_daemons_line_without_running_the_checks(
    seeded: Seeded, warm: Path, live_daemon_store: tuple[Path, dict[str, str]]
) -> None:
    store, record = live_daemon_store
    out, modules = run_probe(seeded, warm, ["diagnose", "0"], store=store)
    assert out.splitlines()[0] == record["summary"]
    assert "autoretry diagnose — all time" in out
    assert pulled(modules, (*NEVER, *DOCTOR)) == []


def test_diagnose_runs_the_checks_when_what_they_read_changed(
    seeded: Seeded, warm: Path, live_daemon_store: tuple[Path, dict[str, str]]
) -> None:
    store, record = live_daemon_store
    plugins = warm / "config" / "opencode" / "plugins"
    plugins.mkdir(parents=True)
    (plugins / "autoretry.js").write_text("// edited\n")  # the bridge file changed since
    try:
        out, modules = run_probe(seeded, warm, ["diagnose", "0"], store=store)
    finally:
        shutil.rmtree(warm / "config" / "opencode")
    assert out.splitlines()[0].startswith("autoretry doctor: ")
    assert "bridge" in out.splitlines()[0] and "autoretry diagnose — all time" in out
    assert pulled(modules, ("opencode_autoretry.diagnostics.doctor.checks",)) != []


def test_a_second_text_diagnose_prints_the_line_the_first_kept(
    seeded: Seeded, warm: Path, tmp_path: Path
) -> None:
    store = tmp_path / "state" / "autoretry.db"  # no daemon has run with this state dir
    first, before = run_probe(seeded, warm, ["diagnose"], store=store)
    again, after = run_probe(seeded, warm, ["diagnose"], store=store)
    line = first.splitlines()[0]
    assert line.startswith("autoretry doctor: ") and again.splitlines()[0] == line
    assert pulled(before, DOCTOR[:1]) and not pulled(after, DOCTOR)
    assert (tmp_path / "state" / "doctor-line.json").is_file()
