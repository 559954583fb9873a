"""PURE: model fallback — continue a turn on the next model when the failure can only repeat.

``[fallback]`` maps ``"provider/model"`` (or ``"*"``) to an ordered chain of models. After the
budget core decided (``budget.decide``), ``revise`` looks at the decision once more: when the
turn's failure is bound to its model — a hard quota or usage limit, a rejected key, or a
transient group (rate limit, server error, timeout, disconnect, stream) whose budget ran out on
this model — and the chain has a model the turn has not tried, the decision becomes one
continuation on that model (``Decision.model``) with a fresh transient budget. The models tried
are read from the turn itself (every assistant step names its model), so nothing new is stored
and a restart forgets nothing. A chain used up ends as a NOTIFY (``gave_up``).

The chain is the one of the model the user chose for the turn (its user message), so the next
real user message starts again from the user's own model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from opencode_autoretry.causes import Cause, Facts, ModelSwitch
from opencode_autoretry.config.paths import opencode_config_files
from opencode_autoretry.config.settings import ConfigError
from opencode_autoretry.decisions.budget import DecisionContext
from opencode_autoretry.decisions.error_kinds import usage_limited
from opencode_autoretry.decisions.gates import waiting_on_user
from opencode_autoretry.decisions.policy import INTERRUPTION_GROUPS, Policy, fill
from opencode_autoretry.models import (
    Action,
    BudgetGroup,
    Decision,
    Message,
    Turn,
    TurnLedger,
    Verdict,
)

WILDCARD = "*"
#: Transient groups whose exhaustion means "this model, now, is not going to work".
MODEL_BOUND_GROUPS: frozenset[BudgetGroup] = INTERRUPTION_GROUPS - {BudgetGroup.UNKNOWN}
_MODEL = re.compile(r"^[^/\s]+/\S+$")


class FallbackError(ConfigError):
    """Bad ``[fallback]`` table, or a fallback model OpenCode does not know; names it."""


@dataclass(frozen=True)
class FallbackChains:
    chains: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def chain_for(self, model: str | None) -> tuple[str, ...]:
        return self.chains.get(model or "", ()) or self.chains.get(WILDCARD, ())

    def targets(self) -> set[str]:
        return {m for chain in self.chains.values() for m in chain}


def load_fallback(raw: object) -> FallbackChains:
    if not isinstance(raw, Mapping):
        raise FallbackError(f"fallback must be a table, got {type(raw).__name__}")
    chains: dict[str, tuple[str, ...]] = {}
    for key, value in raw.items():
        path = f'fallback."{key}"'
        if key != WILDCARD and not _MODEL.match(str(key)):
            raise FallbackError(f'{path}: the key must be "provider/model" or "*"')
        if not isinstance(value, list) or not value:
            raise FallbackError(f'{path} must be a non-empty list of "provider/model"')
        chain: list[str] = []
        for index, item in enumerate(value):
            if not isinstance(item, str) or not _MODEL.match(item):
                raise FallbackError(f'{path}[{index}] must be "provider/model", got {item!r}')
            if item == key:
                raise FallbackError(f"{path}[{index}]: {item} falls back to itself")
            if item not in chain:
                chain.append(item)
        chains[str(key)] = tuple(chain)
    return FallbackChains(chains)


# --- OpenCode's models (start-up check) ------------------------------------------------------


def configured_models(config: Mapping[str, Any]) -> dict[str, set[str]]:
    """Provider id -> the model ids OpenCode's config lists for it (providers with a
    ``models`` table only; others come from OpenCode's catalogue and cannot be checked)."""
    providers = config.get("provider")
    known: dict[str, set[str]] = {}
    if isinstance(providers, Mapping):
        for provider_id, entry in providers.items():
            models = entry.get("models") if isinstance(entry, Mapping) else None
            if isinstance(models, Mapping) and models:
                known[str(provider_id)] = {str(m) for m in models}
    return known


def read_opencode_config(paths: Iterable[Path]) -> dict[str, Any] | None:
    """The first readable plain-JSON OpenCode config among ``paths``, else None."""
    for path in paths:
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(value, dict):
            return value
    return None


def unknown_models(chains: FallbackChains, config: Mapping[str, Any] | None) -> list[str]:
    """Fallback targets OpenCode's config says it does not have (empty when unreadable)."""
    if config is None:
        return []
    known = configured_models(config)
    missing = []
    for target in sorted(chains.targets()):
        provider, _, model = target.partition("/")
        if provider in known and model not in known[provider]:
            missing.append(target)
    return missing


# --- deciding --------------------------------------------------------------------------------


def model_of(message: Message | None) -> str | None:
    if message is None or not message.provider_id or not message.model_id:
        return None
    return f"{message.provider_id}/{message.model_id}"


def bound_cause(decision: Decision, verdict: Verdict) -> str | None:
    """Why the failure can only repeat on this model, or None."""
    if decision.action is Action.NOTIFY and decision.group in MODEL_BOUND_GROUPS:
        return f"{decision.group} budget exhausted"
    if decision.action is not Action.SKIP or decision.cause is not Cause.NOT_RETRYABLE:
        return None
    error = verdict.error
    if error is not None and (error.name == "ProviderAuthError" or error.status_code in (401, 403)):
        return "auth failure"
    if error is not None and usage_limited(error):
        return "usage limit"
    return None


def _tried(turn: Turn) -> list[str]:
    models = [model_of(turn.user), *(model_of(step) for step in turn.steps)]
    return [m for i, m in enumerate(models) if m and m not in models[:i]]


def next_model(turn: Turn, chains: FallbackChains) -> str | None:
    """The chain's next model this turn has not tried, if any (a switch would go there)."""
    tried = _tried(turn)
    chain = chains.chain_for(tried[0] if tried else None)
    return next((m for m in chain if m not in tried), None)


def revise(
    decision: Decision, ledger: TurnLedger, verdict: Verdict, turn: Turn,
    context: DecisionContext, chains: FallbackChains, policy: Policy, now: datetime,
) -> tuple[Decision, TurnLedger]:
    """The budget core's decision, or a switch to the next model of the turn's chain."""
    cause = bound_cause(decision, verdict)
    if cause is None or context.is_child is not False or not context.enabled:
        return decision, ledger
    if waiting_on_user(context.live) is not None:
        return decision, ledger
    if verdict.message_id is not None and verdict.message_id in ledger.handled:
        facts = replace(decision.facts, failure_id=verdict.message_id)
        return replace(decision, action=Action.SKIP, cause=Cause.ALREADY_SWITCHED,
                       facts=facts), ledger
    tried = _tried(turn)
    chain = chains.chain_for(tried[0] if tried else None)
    current = model_of(turn.last_step) or (tried[0] if tried else "?")
    following = [m for m in chain if m not in tried]
    if not chain:
        return decision, ledger
    if not following:
        used_up = _used_up(decision, verdict, tried, chain, policy)
        if used_up.action is Action.NOTIFY and verdict.message_id is not None:
            ledger = replace(ledger, handled=ledger.handled | {verdict.message_id})
        return used_up, ledger
    target = following[0]
    index = chain.index(target) + 1
    label = f"{cause} on {current}"
    switched = Decision(
        action=Action.INJECT,
        cause=Cause.MODEL_SWITCH,
        facts=Facts(detail=verdict.reason, switch=ModelSwitch(current, target, cause)),
        session_id=decision.session_id, turn_id=decision.turn_id, kind=verdict.kind,
        group=verdict.group, text=fill(policy.text("interruption"), reason=label), due=now,
        used_before=index - 1, used_after=index, limit=len(chain), model=target,
    )
    return switched, _fresh_transient_budget(ledger, verdict.message_id)


def _used_up(decision: Decision, verdict: Verdict, tried: list[str], chain: tuple[str, ...],
             policy: Policy) -> Decision:
    used_up = replace(decision.facts, detail=verdict.reason, tried=tuple(tried))
    if decision.action is Action.NOTIFY:
        return replace(decision, facts=used_up)
    if len(tried) < 2:
        return decision  # never switched: a plain terminal error
    text = fill(policy.text("exhausted"), used=len(tried) - 1, group="fallback models",
                kind=verdict.kind)
    return replace(
        decision, action=Action.NOTIFY, text=text, used_before=len(chain), used_after=len(chain),
        limit=len(chain), cause=Cause.FALLBACK_USED_UP, facts=used_up,
    )


def _fresh_transient_budget(ledger: TurnLedger, message_id: str | None) -> TurnLedger:
    used = {g: n for g, n in ledger.used.items() if g not in INTERRUPTION_GROUPS}
    handled = ledger.handled | {message_id} if message_id else ledger.handled
    return replace(ledger, used=used, exhausted=ledger.exhausted - INTERRUPTION_GROUPS,
                   handled=handled, first_failure=None)


def check_models(chains: FallbackChains, environ: Mapping[str, str], config_dir: Path) -> None:
    """Start-up: refuse a fallback model OpenCode's (readable) config does not list."""
    if not chains.chains:
        return
    files = opencode_config_files(environ, config_dir)
    missing = unknown_models(chains, read_opencode_config(files))
    if missing:
        raise FallbackError(
            f"fallback: OpenCode does not know {', '.join(missing)} (not among the models its "
            f"config lists for that provider; checked {', '.join(str(f) for f in files)})"
        )
