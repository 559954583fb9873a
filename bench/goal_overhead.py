"""Goal checks (issue 22): the overhead of one goal iteration and the loop thread's share.

In-process, deterministic: the daemon's real ``Loop`` over the unit tests' fakes
(tests/daemon_fakes.py: a real store, a row-written OpenCode DB, a fake bridge) with the real
``CheckRunner`` and ``run_check`` (``$SHELL -c``). One iteration = a healthy end (the idle
event) -> the check on its worker -> its result through the inbox -> the decision -> the
continuation sent. Measured per iteration:

- overhead: the iteration's wall time minus the check's own run time;
- loop thread: the time spent inside ``Loop.handle`` for the idle and for the result. The
  check never runs there: a check that sleeps 1 s leaves that figure unchanged.

    .venv/bin/python bench/goal_overhead.py [--runs 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]

from daemon_fakes import Harness  # noqa: E402

from opencode_autoretry.daemon.goals.runner import CheckRunner, GoalCheckDone  # noqa: E402


def iteration(h: Harness, sid: str, parent: str) -> tuple[float, float, float, bool, float]:
    """(wall ms, loop-thread ms, check ms, ran off the loop thread, result ms) of one goal
    iteration; result ms: the loop's handling of the check's result (decide, record, send)."""
    h.rows.assistant(sid, parent, text="All done: the parser is in place and its tests pass.")
    h.rows.commit()
    sent_before = len(h.prompts())
    began = time.perf_counter()
    h.status(sid, "idle")
    loop_s = time.perf_counter() - began
    mark = time.perf_counter()
    h.event("session.idle", sessionID=sid)  # starts the check on its worker
    loop_s += time.perf_counter() - mark
    for thread in list(h.loop.goals.runner._running.values()):
        thread.join()
    [done] = h.loop.posted
    h.loop.posted.clear()
    assert isinstance(done, GoalCheckDone)
    mark = time.perf_counter()
    h.loop.handle(done)
    result_s = time.perf_counter() - mark
    loop_s += result_s
    wall = time.perf_counter() - began
    assert len(h.prompts()) == sent_before + 1, "no continuation was sent"
    off_loop = done.worker != threading.get_ident()
    return wall * 1000, loop_s * 1000, done.result.duration_s * 1000, off_loop, result_s * 1000


def measure(command: str, runs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        h = Harness(Path(tmp), goal={"max_continuations": runs + 1})
        h.loop.goals.runner = CheckRunner(h.loop.posted.append, 60.0)
        h.hello()
        sid = h.session()
        h.rows.conn.execute("UPDATE session SET directory = ? WHERE id = ?", (tmp, sid))
        h.command(sid, f"goal {command}")
        user = h.user(sid)
        h.chat(sid, user)
        h.status(sid, "busy")
        parent = user
        walls, loops, overheads, results, off = [], [], [], [], True
        for _ in range(runs):
            wall, loop_ms, check_ms, off_loop, result_ms = iteration(h, sid, parent)
            results.append(result_ms)
            walls.append(wall)
            loops.append(loop_ms)
            overheads.append(wall - check_ms)
            off = off and off_loop
            prompt = h.prompts()[-1]
            h.chat(sid, f"msg_c{len(walls)}", prompt.text, marker=dict(prompt.marker or {}))
            h.status(sid, "busy")
            parent = h.injected_row(sid, prompt)
        return {"overhead_ms": statistics.median(overheads), "overhead_p90_ms":
                sorted(overheads)[int(0.9 * (len(overheads) - 1))],
                "loop_ms": statistics.median(loops), "wall_ms": statistics.median(walls),
                "off_loop": float(off), "result_ms": statistics.median(results),
                "start_ms": statistics.median(h.loop.goals.runner.start_ms)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args().runs
    uuid = "cat /proc/sys/kernel/random/uuid"  # a new failure each time: never stagnant
    for command in (f"{uuid}; exit 1", f"sleep 1; {uuid}; exit 1"):
        figures = measure(command, runs)
        print(f"{command!r:>18}: overhead per iteration median {figures['overhead_ms']:.1f} ms "
              f"(p90 {figures['overhead_p90_ms']:.1f}); loop thread median "
              f"{figures['loop_ms']:.1f} ms per iteration (of it: starting the worker "
              f"{figures['start_ms']:.2f} ms, the result {figures['result_ms']:.1f} ms); "
              f"wall {figures['wall_ms']:.0f} ms; "
              f"the check ran on the loop thread: {'never' if figures['off_loop'] else 'YES'}")


if __name__ == "__main__":
    main()
