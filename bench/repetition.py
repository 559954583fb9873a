"""Benchmark: repetition detectors vs a straightforward port of MiMo's windowed KMP detector.

Run: ``.venv/bin/python bench/repetition.py`` (about a minute; no downloads, seeded RNG).
Feeds 1 MB of ordinary text and 1 MB of looping text in 32-64 char deltas to each detector,
prints a table and rewrites the "Repetition" section of bench/README.md.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from mimo_kmp import MimoKmpDetector  # noqa: E402

from opencode_autoretry.repetition.guard import (  # noqa: E402
    StreamGuard,
    TailPeriodDetector,
    TokenBlockDetector,
)

SIZE = 1 << 20
README = Path(__file__).parent / "README.md"
WORDS = (  # noqa: SIM905 - reads better than 150 quoted words
    "the of and to in is that for it with as was on be by this are from or have an not they "
    "which you were all there would their we been has when who will more no if out so said "
    "what up its about into than them can only other new some could time these two may then "
    "first any now such like over even most made after also did many before must through "
    "back years where much way well down should because each just those people how too "
    "little state good very make world still own see work long here get both between life "
    "being under never day same another know while last might great old year off come since "
    "against go came right used take three parser cache store retry config module handler"
).split(" ")
HANZI = "".join(chr(c) for c in range(0x4E00, 0x4E00 + 3000))  # CJK ideographs


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(5, 22))]
    return " ".join(words).capitalize() + rng.choice(".!?") + " "


def normal_piece(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.45:
        return "".join(sentence(rng) for _ in range(rng.randint(1, 4))) + "\n"
    if kind < 0.6:
        name = rng.choice(WORDS)
        return (
            f"    {name}_{rng.randint(0, 999)} = compute({rng.randint(0, 99)}, "
            f"'{rng.choice(WORDS)}', retries={rng.randint(1, 9)})\n"
        )
    if kind < 0.72:
        return (
            f"2026-11-30T14:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z INFO "
            f"worker-{rng.randint(1, 8)} {rng.choice(WORDS)} done in {rng.randint(1, 999)}ms\n"
        )
    if kind < 0.8:
        cells = " | ".join(rng.choice(WORDS) for _ in range(4))
        return f"| {rng.randint(1, 99)} | {cells} |\n"
    if kind < 0.88:
        return f"{rng.randint(1, 30)}. {sentence(rng)}\n"
    if kind < 0.96:
        return "".join(rng.choice(HANZI) for _ in range(rng.randint(15, 60))) + "。\n"
    return "```\n" + "".join(f"x{i} = {rng.randint(0, 9)}\n" for i in range(5)) + "```\n"


def normal_text(rng: random.Random, size: int) -> str:
    parts, total = [], 0
    while total < size:
        piece = normal_piece(rng)
        parts.append(piece)
        total += len(piece)
    return "".join(parts)[:size]


LOOP_KINDS: dict[str, Callable[[random.Random], str]] = {
    "word": lambda rng: rng.choice(["again ", "the ", "loop ", "递归", "ok, "]),
    "cjk phrase": lambda rng: "".join(rng.choice(HANZI) for _ in range(rng.randint(4, 10))) + "，",
    "sentence": lambda rng: sentence(rng),
    "paragraph": lambda rng: "".join(sentence(rng) for _ in range(rng.randint(3, 5))) + "\n",
}


@dataclass
class Episode:
    kind: str
    begin: int  # the part (stream) begins here, with ordinary text
    loop_start: int  # offset of the loop inside the whole looping text
    needed: int  # chars of loop the StreamGuard's threshold needs (R(p) * p, token rule aside)


@dataclass
class Chunk:
    offset: int
    text: str
    episode: int  # -1 for the ordinary text
    first: bool  # first delta of a new part: detectors are reset


def looping_text(
    rng: random.Random, size: int, intro: tuple[int, int]
) -> tuple[str, list[Episode]]:
    from opencode_autoretry.repetition.guard import PeriodThresholds, required_repeats

    parts: list[str] = []
    episodes: list[Episode] = []
    total = 0
    kinds = list(LOOP_KINDS)
    while total < size:
        text = normal_text(rng, rng.randint(*intro))
        kind = kinds[len(episodes) % len(kinds)]
        block = LOOP_KINDS[kind](rng)
        loop = block * (6000 // len(block) + 1)
        repeats = required_repeats(len(block), block, False, PeriodThresholds()) or 0
        parts += [text, loop]
        episodes.append(Episode(kind, total, total + len(text), repeats * len(block)))
        total += len(text) + len(loop)
    return "".join(parts), episodes


def cut(rng: random.Random, text: str, episodes: list[Episode] | None) -> list[Chunk]:
    """32-64 char deltas; with episodes, every part is cut separately (a delta never spans
    two parts) and its first delta is marked so the detectors are reset there."""
    bounds = [(e.begin, k) for k, e in enumerate(episodes)] if episodes else [(0, -1)]
    ends = [b for b, _ in bounds[1:]] + [len(text)]
    out: list[Chunk] = []
    for (begin, episode), end in zip(bounds, ends, strict=True):
        i = begin
        while i < end:
            size = rng.randint(32, 64)
            out.append(Chunk(i, text[i : min(i + size, end)], episode, i == begin))
            i += size
    return out


@dataclass
class Contender:
    name: str
    make: Callable[[], object]
    feed: str  # method name

    def run(self, chunks: list[Chunk], episodes: list[Episode]) -> tuple[float, int, int, dict]:
        """(seconds, chars fed, hits, {episode: chars from the loop start to the detection}).

        A hit stops the part, as the bridge would: the rest of that episode is not fed (its
        cost would be the caller's choice, not the detector's), so per-KB figures are over
        the chars each contender actually had to scan."""
        detector = self.make()
        feed = getattr(detector, self.feed)
        reset = detector.reset
        hits, fed, distances, stopped = 0, 0, {}, False
        began = time.process_time()  # CPU time: other load on the machine is not ours
        for chunk in chunks:
            if chunk.first:
                reset()
                stopped = False
            if stopped:
                continue
            fed += len(chunk.text)
            if feed(chunk.text):
                hits += 1
                if chunk.episode >= 0:
                    loop_start = episodes[chunk.episode].loop_start
                    distances[chunk.episode] = chunk.offset + len(chunk.text) - loop_start
                    stopped = True
        return time.process_time() - began, fed, hits, distances


def peak_memory(contender: Contender, chunks: list[Chunk]) -> tuple[int, int]:
    """(retained, peak) tracemalloc bytes of one stream fed 256 KB of ordinary text: what
    the detector holds between deltas, and the most it held at once (temporaries included)."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    detector = contender.make()
    feed = getattr(detector, contender.feed)
    for chunk in chunks:
        feed(chunk.text)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return current - base, peak - base


CONTENDERS = [
    Contender("MiMo KMP port", MimoKmpDetector, "append"),
    Contender("tail-period", TailPeriodDetector, "feed"),
    Contender("token-block", TokenBlockDetector, "feed"),
    Contender("StreamGuard (both)", StreamGuard, "feed"),
]


#: (label, intro range): loops after a short answer, and after a long one (window full).
CORPORA = [
    ("ordinary", None),
    ("looping, short parts", (500, 2000)),
    ("looping, long parts", (8000, 12000)),
]
REPEATS = 3  # best of 3: other work on the machine only ever adds time


def measure() -> dict:
    rng = random.Random(20261130)
    corpora = []
    for label, intro in CORPORA:
        if intro is None:
            text, episodes = normal_text(rng, SIZE), []
        else:
            text, episodes = looping_text(rng, SIZE, intro)
        corpora.append((label, cut(rng, text, episodes or None), episodes))
    results: dict = {}
    for contender in CONTENDERS:
        row = results[contender.name] = {}
        for label, chunks, episodes in corpora:
            runs = [contender.run(chunks, episodes) for _ in range(REPEATS)]
            seconds = min(r[0] for r in runs)
            _, fed, hits, distances = runs[0]
            row[label] = {
                "ms_per_kb": seconds * 1000 / (fed / 1024),
                "mb_per_s": fed / seconds / 1e6,
                "kb_fed": fed / 1024,
                "hits": hits,
                "distances": distances,
                "episodes": episodes,
            }
        retained, peak = peak_memory(contender, corpora[0][1][: len(corpora[0][1]) // 4])
        row["memory_kb"] = (retained / 1024, peak / 1024)
    return results


def distance_rows(results: dict, label: str) -> list[str]:
    episodes = results["MiMo KMP port"][label]["episodes"]
    rows = []
    for kind in LOOP_KINDS:
        ids = [k for k, e in enumerate(episodes) if e.kind == kind]
        needed = statistics.median(episodes[k].needed for k in ids)
        cells = []
        for name in ("MiMo KMP port", "StreamGuard (both)"):
            got = results[name][label]["distances"]
            found = [got[k] for k in ids if k in got]
            within = sum(1 for d in found if d <= 1024)
            cells.append(
                f"{len(found)}/{len(ids)} caught, median {statistics.median(found):.0f}, "
                f"max {max(found)}, <=1 KB: {within}"
                if found
                else f"0/{len(ids)} caught"
            )
        rows.append(f"| {label}: {kind} | {needed:.0f} | {cells[0]} | {cells[1]} |")
    return rows


def report(results: dict) -> str:
    base = results["MiMo KMP port"]
    head = "| detector | memory/stream: retained, peak |"
    rule = "|---|---|"
    for label, _ in CORPORA:
        head += f" {label}: ms/KB (MB/s) | x cheaper |"
        rule += "---|---|"
    lines = [head, rule]
    for name, row in results.items():
        line = f"| {name} | {row['memory_kb'][0]:.0f} KB, {row['memory_kb'][1]:.0f} KB |"
        for label, _ in CORPORA:
            r = row[label]
            ratio = base[label]["ms_per_kb"] / r["ms_per_kb"]
            line += f" {r['ms_per_kb']:.4f} ({r['mb_per_s']:.2f}) | {ratio:.1f}x |"
        lines.append(line)
    fps = ", ".join(f"{name}: {row['ordinary']['hits']}" for name, row in results.items())
    scanned = ", ".join(
        f"{name}: {row[label]['kb_fed']:.0f} KB"
        for label, _ in CORPORA[1:]
        for name, row in results.items()
        if name in ("MiMo KMP port", "StreamGuard (both)")
    )
    lines += [
        "",
        f"False positives on the ordinary 1 MB: {fps}.",
        "",
        "Looping corpora: 1 MB of episodes, one part each: ordinary text (0.5-2 KB, or 8-12 KB "
        "so the KMP window is full), then a 6 KB loop of a word, a CJK phrase, a sentence or a "
        "paragraph. A hit stops the part, as the bridge would, so each contender scans only "
        "up to its own detection and ms/KB is over what it scanned "
        f"(short then long parts: {scanned}). Times are CPU time (process_time), best of "
        f"{REPEATS} runs.",
        "",
        "Detection distance: chars fed from the loop's first char to the end of the delta that "
        "raised the detection.",
        "",
        "| corpus: loop kind | chars the guard's threshold needs (median) | MiMo KMP port | "
        "StreamGuard |",
        "|---|---|---|---|",
        *distance_rows(results, CORPORA[1][0]),
        *distance_rows(results, CORPORA[2][0]),
    ]
    return "\n".join(lines)


NOTES = """
How the detectors stay cheap: a check only asks the periods that can matter. A suffix with
period p ends with a key (its last 16 chars) that also occurs p chars earlier, so `str.rfind`
proposes candidates and slice comparisons verify them, both at C speed; ordinary prose yields
almost no candidates. The token-block detector interns each token to one character, so its
500-token window is a `str` and the same tools apply. A property test checks the tail-period
scan against a brute-force KMP reference (MiMo's smallest-period-of-every-suffix semantics).

Why the short-parts ratio is lower: the KMP port's check costs O(buffer), and in a part that
is only 1-3 KB long its buffer is short, so it is cheap there; our checks have a fixed
Python-call floor (~10 us). Once a response is long enough to fill the window (ordinary text,
long parts) the KMP cost per KB is 2-6 ms and ours stays at ~0.1 ms.

Thresholds (tail-period, repeats of the suffix's smallest period p; window 4000, p <= 800):
layout-only blocks (digits, whitespace, rules, pipes, box drawing) keep MiMo's table (p=1
300, p<5 80, p<15 40, p<50 16, p<200 8, else 5); word-like blocks of <= 12 chars need 20
(the watchdog's short_pattern: "递归"x20, "."x25), sentences of 13-49 chars need 6 (its
duplicate_sentence), 50-199 chars 8 (MiMo's "72-char sentence x6 is no loop"), >= 200 chars 5;
inside an open fence only p >= 30 counts, with min(24, 4000 // p) copies so it stays reachable.
The few sentence loops caught after 2 KB began inside a code fence the ordinary text had left
open (the generator cuts text anywhere), where both detectors are deliberately stricter.
"""


def write_readme(table: str) -> None:
    section = (
        "## Repetition\n\n"
        "`.venv/bin/python bench/repetition.py` (seeded, no downloads, about a minute). 1 MB of "
        "ordinary text (prose, code, logs, tables, lists, CJK, fences) and 1 MB of looping text "
        "in two shapes, fed in 32-64 char deltas. The baseline is `bench/mimo_kmp.py`, a "
        "straightforward Python port of MiMo's detector (window 8192, check every 256 chars, "
        "KMP prefix function over the reversed tail). Figures from one run on a shared "
        "machine (CPU time, so other load counts little); ratios matter more than absolute "
        "times.\n\n" + table + "\n" + NOTES
    )
    text = README.read_text("utf-8") if README.exists() else "# Benchmarks\n"
    start = text.find("## Repetition")
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + 1)
        text = text[:start] + section + (text[end + 1 :] if end >= 0 else "")
    README.write_text(text, "utf-8")


def main() -> None:
    began = time.perf_counter()
    table = report(measure())
    print(table)
    write_readme(table)
    print(f"\nwrote {README} in {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
