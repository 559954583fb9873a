"""Frozen values shared by every part of opencode-autoretry.

Everything that crosses a module boundary is one of these: OpenCode's rows turned into
models (sessions, messages, parts, turns), the classifier's verdicts, the decision core's
ledgers and decisions. Times are aware UTC datetimes; OpenCode's epoch-ms integers are
converted once, by the reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from opencode_autoretry.causes import Cause, Facts, ModelSwitch, render_reason

#: Key under a text part's ``metadata`` that marks a message autoretry injected.
MARKER_KEY = "autoretry"
#: The zero of OpenCode's epoch-ms times and of the reports' compact microsecond times.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def from_epoch_ms(value: int | float | None) -> datetime | None:
    """OpenCode stores epoch milliseconds; the rest of the code speaks aware UTC."""
    if value is None:
        return None
    return datetime.fromtimestamp(value / 1000, tz=UTC)


def to_epoch_ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"


class PartType(StrEnum):
    TEXT = "text"
    REASONING = "reasoning"
    TOOL = "tool"
    STEP_START = "step-start"
    STEP_FINISH = "step-finish"
    COMPACTION = "compaction"
    PATCH = "patch"
    FILE = "file"
    AGENT = "agent"
    SUBTASK = "subtask"
    OTHER = "other"

    @classmethod
    def parse(cls, raw: object) -> PartType:
        try:
            return cls(str(raw))
        except ValueError:
            return cls.OTHER


class ToolStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    ERROR = "error"


@dataclass(frozen=True)
class Part:
    """One row of OpenCode's ``part`` table (``data`` is the parsed JSON)."""

    id: str
    message_id: str
    session_id: str
    type: PartType
    time_created: datetime
    data: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def text(self) -> str:
        value = self.data.get("text")
        return value if isinstance(value, str) else ""

    @property
    def synthetic(self) -> bool:
        return bool(self.data.get("synthetic")) or bool(self.data.get("ignored"))

    @property
    def metadata(self) -> Mapping[str, Any]:
        value = self.data.get("metadata")
        return value if isinstance(value, Mapping) else {}

    @property
    def tool(self) -> str | None:
        value = self.data.get("tool")
        return value if isinstance(value, str) else None

    @property
    def tool_status(self) -> ToolStatus | None:
        state = self.data.get("state")
        if not isinstance(state, Mapping):
            return None
        try:
            return ToolStatus(str(state.get("status")))
        except ValueError:
            return None

    @property
    def marker(self) -> Mapping[str, Any] | None:
        """The durable autoretry marker, if autoretry injected this part."""
        value = self.metadata.get(MARKER_KEY)
        return value if isinstance(value, Mapping) else None


@dataclass(frozen=True)
class Tokens:
    """A step's token counts as OpenCode records them (``tokens`` of the message)."""

    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total: int = 0


@dataclass(frozen=True)
class ErrorInfo:
    """An assistant error, normalised from OpenCode's ``{name, data}`` shape (and older ones)."""

    name: str
    message: str = ""
    status_code: int | None = None
    is_retryable: bool | None = None
    code: str | None = None  # data.metadata.code, e.g. ECONNRESET
    response_headers: Mapping[str, str] = field(default_factory=dict, compare=False)
    response_body: str | None = None


@dataclass(frozen=True)
class Message:
    """One row of OpenCode's ``message`` table, with its parts in id order."""

    id: str
    session_id: str
    role: Role
    time_created: datetime
    time_completed: datetime | None = None
    parent_id: str | None = None  # assistant: the user message that started the turn
    finish: str | None = None
    tokens: Tokens = Tokens()
    error: ErrorInfo | None = None
    agent: str | None = None
    mode: str | None = None
    provider_id: str | None = None
    model_id: str | None = None
    variant: str | None = None
    summary: bool = False
    parts: tuple[Part, ...] = ()
    cost: float = 0.0  # assistant: what OpenCode says the step cost, in USD (issue 22)

    @property
    def marker(self) -> Mapping[str, Any] | None:
        for part in self.parts:
            found = part.marker
            if found is not None:
                return found
        return None

    @property
    def synthetic(self) -> bool:
        """A user message OpenCode wrote itself (compaction, compaction-continue)."""
        if self.role is not Role.USER or not self.parts:
            return False
        return all(
            p.synthetic or p.type is PartType.COMPACTION or p.metadata.get("compaction_continue")
            for p in self.parts
        )


@dataclass(frozen=True)
class Session:
    """An OpenCode session row: a subagent's has a ``parent_id``."""

    id: str
    parent_id: str | None
    slug: str
    title: str
    directory: str
    project_id: str
    version: str
    time_created: datetime
    time_updated: datetime

    @property
    def is_child(self) -> bool:
        return self.parent_id is not None


@dataclass(frozen=True)
class Turn:
    """A real user message and the assistant steps whose ``parentID`` is it.

    ``user`` is the message that opened the turn; injected and synthetic user messages that
    follow it belong to the same turn and are listed in ``followups``.
    """

    session_id: str
    user: Message
    steps: tuple[Message, ...] = ()
    followups: tuple[Message, ...] = ()

    @property
    def id(self) -> str:
        return self.user.id

    @property
    def last_step(self) -> Message | None:
        return self.steps[-1] if self.steps else None


@dataclass(frozen=True)
class LiveFacts:
    """What only the owning OpenCode process knows, as last reported by its bridge."""

    busy: bool = False
    retrying: bool = False
    retry_next: datetime | None = None
    permission_pending: bool = False
    question_pending: bool = False
    child_busy: bool = False
    # The owner went idle straight out of OpenCode's retry back-off and autoretry had not asked
    # for an abort: only a stop pressed by the user (or another client) ends a back-off that way.
    stopped_in_retry: bool = False


class Kind(StrEnum):
    HEALTHY = "healthy"
    RUNNING = "running"
    BLANK = "blank"
    THINK_ONLY = "think_only"
    FORGED_LENGTH = "forged_length"
    TRUNCATED = "truncated"
    TOOL_AS_TEXT = "tool_as_text"
    DISCONNECT = "disconnect"
    STREAM_TRUNCATED = "stream_truncated"
    TIMEOUT = "timeout"
    RATE_LIMIT = "rate_limit"
    SERVER_ERROR = "server_error"
    TERMINAL = "terminal"
    USER_ABORT = "user_abort"
    SILENT = "silent"
    ORPHAN = "orphan"
    RUNAWAY = "runaway"
    REPETITION = "repetition"
    STALL = "stall"
    UNFINISHED_TODOS = "unfinished_todos"  # a healthy end with todos left (todos/continuation.py)
    SUBAGENT_STALL = "subagent_stall"  # a child session hung: aborted, never prompted (issue 9)
    GOAL = "goal"  # a healthy end of a session with a goal: its check fails or passed (goals/)


class BudgetGroup(StrEnum):
    """Budgets are counted per turn and per group (see ``budget.py``)."""

    DISCONNECT = "disconnect"
    TIMEOUT = "timeout"
    STREAM = "stream"
    SERVER = "server"
    RATE_LIMIT = "rate_limit"
    UNKNOWN = "unknown"
    BLANK = "blank"
    LENGTH = "length"
    REPETITION = "repetition"
    STALL = "stall"
    TODOS = "todos"
    GOAL = "goal"  # continuations towards a passing goal check (issue 22)
    QUOTA = "quota"  # waits for a usage window to reset (issue 23); spent by no kind


#: Which budget group a retryable kind spends. Kinds absent here never inject.
GROUP_OF_KIND: Mapping[Kind, BudgetGroup] = {
    Kind.BLANK: BudgetGroup.BLANK,
    Kind.THINK_ONLY: BudgetGroup.BLANK,
    Kind.FORGED_LENGTH: BudgetGroup.BLANK,
    Kind.TOOL_AS_TEXT: BudgetGroup.BLANK,
    Kind.TRUNCATED: BudgetGroup.LENGTH,
    Kind.DISCONNECT: BudgetGroup.DISCONNECT,
    Kind.STREAM_TRUNCATED: BudgetGroup.STREAM,
    Kind.TIMEOUT: BudgetGroup.TIMEOUT,
    Kind.RATE_LIMIT: BudgetGroup.RATE_LIMIT,
    Kind.SERVER_ERROR: BudgetGroup.SERVER,
    Kind.SILENT: BudgetGroup.UNKNOWN,
    Kind.RUNAWAY: BudgetGroup.UNKNOWN,
    Kind.REPETITION: BudgetGroup.REPETITION,
    Kind.STALL: BudgetGroup.STALL,
    Kind.UNFINISHED_TODOS: BudgetGroup.TODOS,
    Kind.GOAL: BudgetGroup.GOAL,
}


@dataclass(frozen=True)
class Verdict:
    """The classifier's answer for one turn."""

    kind: Kind
    retryable: bool
    reason: str
    message_id: str | None = None
    retry_after_ms: int | None = None
    error: ErrorInfo | None = None
    text: str | None = None  # a detector's own continuation text (e.g. naming the todos)
    give_up: str | None = None  # a detector's reason to stop for good: notify, exhaust the group
    idle_s: float | None = None  # a hung subagent: how long it made no progress (issue 9)
    resets_at: datetime | None = None  # a usage or rate limit: when its window reopens (issue 23)

    @property
    def group(self) -> BudgetGroup | None:
        return GROUP_OF_KIND.get(self.kind) if self.retryable else None


class Action(StrEnum):
    INJECT = "inject"  # send now
    INJECT_AT = "inject_at"  # send at ``due``
    ABORT_THEN_INJECT = "abort_then_inject"
    NOTIFY = "notify"  # tell the user, send nothing (e.g. budget exhausted)
    ABORT = "abort"  # stop the session, send nothing (a hung subagent, issue 9)
    SKIP = "skip"  # nothing to do, with the reason recorded


@dataclass(frozen=True)
class Decision:
    """What the decision core wants done; only the daemon's actions perform it.

    ``cause`` and ``facts`` say why, typed; ``reason`` is rendered from them for people and
    is never read back by code (``causes.py``)."""

    action: Action
    cause: Cause
    session_id: str
    turn_id: str | None
    kind: Kind | None = None
    group: BudgetGroup | None = None
    text: str | None = None
    due: datetime | None = None
    used_before: int = 0
    used_after: int = 0
    limit: int = 0
    toast: str | None = None  # shown instead of the standard "continuing in 5 s" toast
    model: str | None = None  # "provider/model" to continue on (model fallback, issue 10)
    facts: Facts = Facts()
    #: Taken in observe mode (issue 23): recorded as what autoretry WOULD have done, never
    #: carried out. Set by the performer (``Actions.perform``), never by the decision core,
    #: which decides the same in both modes.
    observed: bool = False
    # The turn's ledger as this decision leaves it, when it changed: the daemon writes it in
    # the one transaction that records the decision and its continuation, so a crash between
    # them cannot leave a budget spent (and its failure "already handled") with nothing sent.
    ledger: TurnLedger | None = field(default=None, compare=False, repr=False)

    @property
    def sends(self) -> bool:
        return self.action in (Action.INJECT, Action.INJECT_AT, Action.ABORT_THEN_INJECT)

    @property
    def reason(self) -> str:
        """The one line people read; code reads ``cause`` and ``facts``."""
        return render_reason(
            str(self.action), self.cause, self.kind and str(self.kind),
            self.group and str(self.group), self.used_before, self.used_after, self.limit,
            self.facts,
        )

    @property
    def switch(self) -> ModelSwitch | None:
        return self.facts.switch

    @property
    def hung_seconds(self) -> float | None:
        return self.facts.hung_seconds


@dataclass(frozen=True)
class TurnLedger:
    """A turn's spent budgets. Stored apart from transient state; reset only by a real user
    message (which opens a new ledger), never by idle, restarts or lost event streams."""

    session_id: str
    turn_id: str
    used: Mapping[BudgetGroup, int] = field(default_factory=dict)
    exhausted: frozenset[BudgetGroup] = frozenset()
    user_aborted: bool = False
    # Added for budget.py: the turn's first retryable failure (group deadlines count from it)
    # and the assistant message ids already acted on (a replayed event never spends twice).
    first_failure: datetime | None = None
    handled: frozenset[str] = frozenset()

    def used_in(self, group: BudgetGroup) -> int:
        return self.used.get(group, 0)
