"""The reply-intent detector over the corpus of final replies (issue 9's false-positive check).

A reply that asks the user, says it is done or says it is blocked must never be classed as one
that may be continued: recall of "stops" is 100 %. The figures are printed (``-s``); no test
writes a file of the repository.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from opencode_autoretry.todos.reply_intent import Intent, read_intent

CORPUS = Path(__file__).parent / "fixtures" / "reply_intent" / "corpus.txt"
HOLDOUT = CORPUS.with_name("holdout.txt")
HOLDOUT2 = CORPUS.with_name("holdout2.txt")
SET_A = CORPUS.parent / "fresh" / "set_a.txt"
STOPS = {"asks", "done", "blocked"}


@dataclass(frozen=True)
class Entry:
    label: str
    lang: str
    text: str
    kind: str = "-"  # the class within the label, in the fresh sets ("conditional", "advice")


def load_corpus(path: Path = CORPUS) -> list[Entry]:
    entries: list[Entry] = []
    label = lang = kind = ""
    lines: list[str] = []
    for line in [*path.read_text(encoding="utf-8").splitlines(), "### end end"]:
        if line.startswith("### "):
            if label:
                entries.append(Entry(label, lang, "\n".join(lines).strip(), kind))
            label, lang, *rest = line[4:].split()
            kind = rest[0] if rest else "-"
            lines = []
        else:
            lines.append(line)
    return entries


def _ratio(hit: int, total: int) -> float:
    return hit / total if total else 1.0


def figures(entries: list[Entry]) -> dict[str, float]:
    predicted = [(e, read_intent(e.text).may_continue) for e in entries]
    tp = sum(1 for e, cont in predicted if cont and e.label == "continue")
    fp = sum(1 for e, cont in predicted if cont and e.label != "continue")
    fn = sum(1 for e, cont in predicted if not cont and e.label == "continue")
    stops = [cont for e, cont in predicted if e.label in STOPS]
    asks = [cont for e, cont in predicted if e.label == "asks"]
    stop_hits = sum(1 for cont in stops if not cont)
    stop_predicted = sum(1 for _, cont in predicted if not cont)
    return {
        "entries": len(entries),
        "continue_precision": _ratio(tp, tp + fp),
        "continue_recall": _ratio(tp, tp + fn),
        "stop_precision": _ratio(stop_hits, stop_predicted),
        "stop_recall": _ratio(stop_hits, len(stops)),
        "asks_recall": _ratio(sum(1 for cont in asks if not cont), len(asks)),
    }


def test_the_corpus_has_200_replies_of_both_kinds_in_both_languages():
    entries = load_corpus()
    assert len(entries) >= 200
    for lang in ("en", "zh"):
        for kind in ("asks", "done", "blocked", "continue"):
            assert any(e.lang == lang and e.label == kind for e in entries), (lang, kind)


def test_no_reply_that_asks_done_or_blocked_is_continued():
    wrong = [e for e in load_corpus() if e.label in STOPS and read_intent(e.text).may_continue]
    assert wrong == []


def test_figures_are_recorded():
    entries = [*load_corpus(), *load_corpus(HOLDOUT), *load_corpus(HOLDOUT2)]
    result = figures(entries)
    lines = ["corpus.txt + holdout.txt + holdout2.txt"]
    lines += [f"{name}: {value:.3f}" if isinstance(value, float) else f"{name}: {value}"
              for name, value in result.items()]
    for lang in ("en", "zh"):
        part = figures([e for e in entries if e.lang == lang])
        lines.append(f"{lang}: continue precision {part['continue_precision']:.3f}, "
                     f"recall {part['continue_recall']:.3f}; asks recall {part['asks_recall']:.3f}")
    missed = [e.text[:70] for e in entries
              if e.label == "continue" and not read_intent(e.text).may_continue]
    lines += ["continue replies held back (safe misses):", *(f"  - {m!r}" for m in missed)]
    print("\n".join(lines))
    assert result["asks_recall"] == 1.0 and result["stop_recall"] == 1.0
    assert result["continue_precision"] == 1.0
    assert result["continue_recall"] >= 0.9  # held back is safe, but the feature must work


@pytest.mark.parametrize("label", ["asks", "done", "blocked"])
def test_each_stop_kind_is_mostly_named_right(label):
    entries = [e for e in load_corpus() if e.label == label]
    right = sum(1 for e in entries if read_intent(e.text).intent is Intent(label))
    assert right / len(entries) >= 0.8, (label, right, len(entries))


@pytest.mark.parametrize("path", [HOLDOUT, HOLDOUT2], ids=["holdout", "holdout2"])
def test_holdout_sets_never_continue_a_stop(path):
    """Sets written after each round of tuning (their first-shot figures: docs/todos.md)."""
    entries = load_corpus(path)
    result = figures(entries)
    print(f"holdout ({len(entries)}): " + ", ".join(f"{k} {v:.3f}" for k, v in result.items()))
    wrong = [e.text for e in entries if e.label in STOPS and read_intent(e.text).may_continue]
    assert wrong == []


@pytest.mark.parametrize(
    ("name", "size", "least_kept"), [("set_a", 326, 70), ("set_b", 322, 68)], ids=["A", "B"]
)
def test_fresh_sets_never_continue_a_stop(name, size, least_kept):
    """Each set was written by someone who never saw the detector and scored once at first
    sight (A: 22 of 213 stops continued, B: 3 of 209; docs/todos.md); each was then tuned on, so
    they are regression sets now."""
    entries = load_corpus(SET_A.with_name(f"{name}.txt"))
    assert len(entries) == size
    wrong = [(e.label, e.lang, e.kind, e.text[:70]) for e in entries
             if e.label in STOPS and read_intent(e.text).may_continue]
    kept = [e for e in entries if e.label == "continue" and read_intent(e.text).may_continue]
    print(f"{name}: {len(wrong)} stops continued; continue recall {len(kept)}/"
          f"{sum(1 for e in entries if e.label == 'continue')}")
    assert wrong == []
    assert len(kept) >= least_kept  # held back is safe, but the feature must still work


def test_fresh_set_c_the_first_sight_measure_holds():
    """Set C is the measure (docs/todos.md): never tuned on. Its first-sight figure is pinned: no
    reply that asks or is blocked continued, at most the 9 ``done`` replies of that day."""
    entries = load_corpus(SET_A.with_name("set_c.txt"))
    assert len(entries) == 338
    continued = [e for e in entries if read_intent(e.text).may_continue]
    wrong = [(e.label, e.kind, e.text[:70]) for e in continued if e.label in STOPS]
    print(f"set C: {len(wrong)} stops continued; continue recall "
          f"{sum(1 for e in continued if e.label == 'continue')}/111")
    assert [w for w in wrong if w[0] != "done"] == []
    assert len(wrong) <= 9
    assert sum(1 for e in continued if e.label == "continue") >= 55  # the feature still works
