"""Live loop watch: the repetition detectors fed from a bridge's event stream.

The daemon loop owns one ``RepetitionWatch``. It keeps one ``StreamGuard`` per streaming part
and channel (text and reasoning separately: a reasoning-only loop burns tokens just as well),
fed by ``message.part.delta``; a part's stream ends when its ``message.part.updated`` carries
``time.end`` (a part boundary), and every stream of a step ends with the step. At each step end
the step's final text, reasoning and tool calls go to the session's ``CrossStepDetector``.

A loop comes back as a ``LoopFound``: what the daemon needs to build a ``Verdict`` (kind
REPETITION) and, for a live loop, the ``Trim`` that keeps the repeated tail out of the model's
next context (loop start + one period is kept, so the model sees what it repeated).

No clock, no IO: everything arrives as arguments. Memory is bounded: at most ``max_streams``
live guards (the least recently fed is dropped first) and bounded id books.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opencode_autoretry.models import Kind, Verdict
from opencode_autoretry.plugin_bridge.protocol import Trim
from opencode_autoretry.repetition.guard import (
    CrossStepDetector,
    Detection,
    StepLimits,
    StepLoop,
    StepSummary,
    StreamGuard,
)

TEXT = "text"
REASONING = "reasoning"
STEPS = "steps"  # the channel of a cross-step loop
_CHANNELS = frozenset({TEXT, REASONING})
EXCERPT_KEEP = 200  # chars of the repeated block kept for the record and the trim check


@dataclass(frozen=True)
class LoopFound:
    """A loop the daemon must act on. ``part_id``/``keep_chars`` are set for a live loop only
    (a cross-step loop has no stream to stop and nothing to trim: its steps are complete)."""

    session_id: str
    message_id: str
    channel: str  # text | reasoning | steps
    detector: str
    period: int
    repeats: int
    excerpt: str
    part_id: str | None = None
    keep_chars: int | None = None

    @property
    def live(self) -> bool:
        """A loop inside a running stream: abort, then inject. Cross-step: inject only."""
        return self.part_id is not None

    def reason(self) -> str:
        where = f"{self.channel} stream" if self.live else "consecutive steps"
        unit = {"tail_period": "chars", "token_block": "tokens"}.get(self.detector, "steps")
        sample = self.excerpt[:60].replace("\n", " ")
        return (
            f"{self.detector} in {where}: a block of {self.period} {unit} "
            f"x{self.repeats} ({sample!r})"
        )

    def verdict(self) -> Verdict:
        return Verdict(Kind.REPETITION, True, self.reason(), message_id=self.message_id)

    def trim(self) -> Trim | None:
        if self.part_id is None or self.keep_chars is None:
            return None
        return Trim(
            session_id=self.session_id,
            message_id=self.message_id,
            part_id=self.part_id,
            keep_chars=self.keep_chars,
            excerpt=self.excerpt[:EXCERPT_KEEP],
        )


def live_loop(
    session_id: str, message_id: str, part_id: str, channel: str, found: Detection
) -> LoopFound:
    return LoopFound(
        session_id=session_id,
        message_id=message_id,
        channel=channel,
        detector=found.detector,
        period=found.period,
        repeats=found.repeats,
        excerpt=found.excerpt,
        part_id=part_id,
        keep_chars=found.loop_start + len(found.excerpt),
    )


def step_loop(session_id: str, message_id: str, found: StepLoop) -> LoopFound:
    return LoopFound(
        session_id=session_id,
        message_id=message_id,
        channel=STEPS,
        detector=found.detector,
        period=found.period,
        repeats=found.streak,
        excerpt=found.key,
    )


@dataclass
class _Stream:
    session_id: str
    message_id: str
    part_id: str
    channel: str
    guard: StreamGuard


@dataclass
class _Step:
    """A step's finished parts, gathered from ``message.part.updated`` for its summary."""

    session_id: str
    texts: dict[str, str] = field(default_factory=dict)  # part id -> final text
    reasonings: dict[str, str] = field(default_factory=dict)
    tools: dict[str, tuple[str, Any]] = field(default_factory=dict)  # part id -> (name, input)

    def summary(self) -> StepSummary:
        return StepSummary.build(
            self.texts.values(), self.reasonings.values(), self.tools.values()
        )


class _Book(OrderedDict[str, None]):
    """A bounded set of ids, oldest dropped first (ids of finished parts and steps)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def add(self, key: str) -> None:
        self[key] = None
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


class RepetitionWatch:
    """All sessions' live streams and step histories; the loop thread is its only user."""

    def __init__(
        self,
        max_streams: int = 32,
        step_limits: StepLimits | None = None,
        guard_factory: Callable[[], StreamGuard] = StreamGuard,
        memory: int = 4096,
    ) -> None:
        self.max_streams = max_streams
        self._step_limits = step_limits
        self._new_guard = guard_factory
        self._streams: OrderedDict[tuple[str, str], _Stream] = OrderedDict()
        self._kinds: OrderedDict[str, str] = OrderedDict()  # part id -> text | reasoning
        self._done = _Book(memory)  # parts whose stream is over: late deltas are ignored
        self._steps: OrderedDict[str, _Step] = OrderedDict()  # message id -> its parts
        self._ended = _Book(memory)  # steps already summarised (finish is reported twice)
        self._memory = memory
        self._cross: dict[str, CrossStepDetector] = {}
        self.evicted = 0  # streams dropped to stay within max_streams

    # -- live streams ---------------------------------------------------------------------

    @property
    def live_streams(self) -> int:
        return len(self._streams)

    def feed_delta(
        self, session_id: str, message_id: str, part_id: str, field_name: str, delta: str
    ) -> LoopFound | None:
        """One ``message.part.delta``; a LoopFound the first time its stream loops."""
        if part_id in self._done or not delta:
            return None
        stream = self._stream(session_id, message_id, part_id, field_name)
        found = stream.guard.feed(delta)
        if found is None:
            return None
        self._close(stream)
        return live_loop(session_id, message_id, part_id, stream.channel, found)

    def _stream(self, session_id: str, message_id: str, part_id: str, field_name: str) -> _Stream:
        # Deltas name the part's field ("text" for text and reasoning parts alike); the
        # channel comes from the part's type, learnt from its first message.part.updated.
        channel = self._kinds.get(part_id) or (field_name if field_name in _CHANNELS else TEXT)
        key = (part_id, field_name)
        stream = self._streams.get(key)
        if stream is None:
            stream = _Stream(session_id, message_id, part_id, channel, self._new_guard())
            self._streams[key] = stream
            self._bound_streams()
        else:
            self._streams.move_to_end(key)
        return stream

    def _bound_streams(self) -> None:
        while len(self._streams) > self.max_streams:
            _, oldest = self._streams.popitem(last=False)
            self._done.add(oldest.part_id)  # half a stream would only give false negatives
            self.evicted += 1

    def _close(self, stream: _Stream) -> None:
        self._done.add(stream.part_id)
        for key in [k for k in self._streams if k[0] == stream.part_id]:
            del self._streams[key]

    def part_done(self, session_id: str, message_id: str, part_id: str) -> LoopFound | None:
        """The part's stream ended (a part boundary): check what is still buffered."""
        for key in [k for k in self._streams if k[0] == part_id]:
            stream = self._streams.pop(key)
            found = stream.guard.finish()
            if found is not None:
                self._done.add(part_id)
                return live_loop(session_id, message_id, part_id, stream.channel, found)
        self._done.add(part_id)
        return None

    # -- parts and steps ------------------------------------------------------------------

    def part_updated(self, session_id: str, part: Mapping[str, Any]) -> LoopFound | None:
        """A ``message.part.updated`` part: learns its type, ends its stream, and records
        its final content for the step summary."""
        part_id, message_id = _str(part.get("id")), _str(part.get("messageID"))
        kind = part.get("type")
        if part_id is None or message_id is None:
            return None
        if kind in _CHANNELS:
            self._remember_kind(part_id, str(kind))
            time = part.get("time")
            if isinstance(time, Mapping) and time.get("end") is not None:
                self._record(session_id, message_id, part_id, str(kind), part.get("text"))
                return self.part_done(session_id, message_id, part_id)
        elif kind == "tool":
            self._record_tool(session_id, message_id, part_id, part)
        return None

    def _remember_kind(self, part_id: str, kind: str) -> None:
        self._kinds[part_id] = kind
        self._kinds.move_to_end(part_id)
        while len(self._kinds) > self._memory:
            self._kinds.popitem(last=False)

    def _step(self, session_id: str, message_id: str) -> _Step:
        step = self._steps.get(message_id)
        if step is None:
            step = self._steps[message_id] = _Step(session_id)
            while len(self._steps) > self.max_streams * 4:
                self._steps.popitem(last=False)
        return step

    def _record(
        self, session_id: str, message_id: str, part_id: str, kind: str, text: object
    ) -> None:
        if not isinstance(text, str) or message_id in self._ended:
            return
        step = self._step(session_id, message_id)
        (step.texts if kind == TEXT else step.reasonings)[part_id] = text

    def _record_tool(
        self, session_id: str, message_id: str, part_id: str, part: Mapping[str, Any]
    ) -> None:
        state = part.get("state")
        name = part.get("tool")
        if not isinstance(state, Mapping) or not isinstance(name, str):
            return
        if state.get("status") not in ("completed", "error") or message_id in self._ended:
            return
        self._step(session_id, message_id).tools[part_id] = (name, state.get("input") or {})

    def message_updated(self, session_id: str, info: Mapping[str, Any]) -> LoopFound | None:
        """An assistant ``message.updated`` with a ``finish``: the step ended (once)."""
        message_id = _str(info.get("id"))
        if info.get("role") != "assistant" or message_id is None or not info.get("finish"):
            return None
        if message_id in self._ended:
            return None
        if info.get("error") or info.get("finish") == "unknown":
            # Aborted or failed, or a stream cut without a finish reason (the runaway
            # detector's case, not a model repeating itself): not a step to compare.
            self._drop_message(message_id)
            return None
        found = self._end_streams_of(message_id)
        step = self._steps.pop(message_id, None) or _Step(session_id)
        self._ended.add(message_id)
        loop = self.step_end(session_id, message_id, step.summary())
        return found or loop

    def _drop_message(self, message_id: str) -> None:
        for key in [k for k, s in self._streams.items() if s.message_id == message_id]:
            self._done.add(key[0])
            del self._streams[key]
        self._steps.pop(message_id, None)
        self._ended.add(message_id)

    def _end_streams_of(self, message_id: str) -> LoopFound | None:
        found = None
        for stream in [s for s in self._streams.values() if s.message_id == message_id]:
            found = found or self.part_done(stream.session_id, message_id, stream.part_id)
        return found

    def step_end(
        self, session_id: str, message_id: str, summary: StepSummary
    ) -> LoopFound | None:
        """Feed one finished step to the session's cross-step detector. After a hit the
        detector starts over, so the next report needs a fresh run of looping steps: the
        reminder (queued for the step after next) gets its chance before escalation."""
        detector = self._cross.get(session_id)
        if detector is None:
            detector = self._cross[session_id] = CrossStepDetector(self._step_limits)
        found = detector.observe(summary)
        if found is None:
            return None
        detector.reset()
        return step_loop(session_id, message_id, found)

    def new_turn(self, session_id: str) -> None:
        """A real user message: cross-step history of the old turn no longer counts."""
        detector = self._cross.get(session_id)
        if detector is not None:
            detector.reset()

    def forget(self, session_id: str) -> None:
        """The session is gone (deleted, or its owner closed): drop everything about it."""
        self._cross.pop(session_id, None)
        for key in [k for k, s in self._streams.items() if s.session_id == session_id]:
            del self._streams[key]
        for message_id in [m for m, s in self._steps.items() if s.session_id == session_id]:
            del self._steps[message_id]

    # -- the loop's one entry point -------------------------------------------------------

    def on_event(
        self, event_type: str, session_id: str, props: Mapping[str, Any]
    ) -> LoopFound | None:
        """Route one bus event (``type`` and ``properties``) to the methods above."""
        if event_type == "message.part.delta":
            message_id, part_id = _str(props.get("messageID")), _str(props.get("partID"))
            delta, name = props.get("delta"), props.get("field")
            if message_id is None or part_id is None or not isinstance(delta, str):
                return None
            return self.feed_delta(session_id, message_id, part_id, str(name or TEXT), delta)
        if event_type == "message.part.updated":
            part = props.get("part")
            return self.part_updated(session_id, part) if isinstance(part, Mapping) else None
        if event_type == "message.updated":
            info = props.get("info")
            return self.message_updated(session_id, info) if isinstance(info, Mapping) else None
        if event_type == "session.deleted":
            self.forget(session_id)
        return None
