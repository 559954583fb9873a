"""PURE: what a turn's final reply says about who moves next.

The unfinished-todos guard may continue a turn only when its last reply carries on by itself
("I'll start with the first one."). A reply that asks the user anything, waits for a decision,
says the work is done or says it is blocked must never be followed by a continuation: the
user, not autoretry, speaks next. So the detector is deliberately one-sided:

- any question mark (``?``, ``？``) outside code, and dozens of English and Chinese request
  phrasings (confirm, choose, approve, provide, "let me know", "should I", "请确认", "您希望",
  "要不要", "是否需要", a sentence ending in 吗/呢 ...), make it ``ASKS``;
- a final sentence that starts like a question ("Should the limit be global") is ``ASKS``
  even without a question mark;
- "blocked", "cannot proceed", "无法继续" ... make it ``BLOCKED``; "all done", "全部完成" ...
  make it ``DONE``;
- a reply that addresses the user at all ("you", "your", 您, 你) is ``ASKS``: a final reply
  that carries on by itself rarely talks to the user, and one that does is probably waiting;
- only a reply with none of these that also announces or shows it carries on ("I'll", "next",
  "now", "moving on", 接下来, 下一步, 现在, 继续 ...) is ``CONTINUES``; a reply with no such
  sign is in doubt, and doubt is a question (``ASKS``).

Checks run on the reply's tail (code fences, inline code and URLs removed), in the order
asks > blocked > done, so a reply that both reports progress and asks something asks.
Measured on ``tests/fixtures/reply_intent/corpus.txt`` by ``tests/test_reply_intent_corpus.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

#: Only the end of a long reply decides (the start is the work itself).
TAIL_CHARS = 1500


class Intent(StrEnum):
    ASKS = "asks"  # asks the user something or waits for a decision
    BLOCKED = "blocked"  # says it cannot go on
    DONE = "done"  # says the work is finished
    CONTINUES = "continues"  # carries on / announces its next step


@dataclass(frozen=True)
class ReplyIntent:
    intent: Intent
    reason: str  # what was found, for the trace

    @property
    def may_continue(self) -> bool:
        return self.intent is Intent.CONTINUES


_FENCE = re.compile(r"```.*?(?:```|\Z)|~~~.*?(?:~~~|\Z)", re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_URL = re.compile(r"\b(?:https?|ftp)://\S+")

_QUESTION_MARK = re.compile(r"[?？¿]")

# English requests, offers of a choice and waits. Word-bounded, case-insensitive.
_ASKS_EN = re.compile(
    r"\b(?:"
    r"let me know|tell me|please (?:confirm|choose|pick|select|provide|share|send|clarify|"
    r"review|approve|advise|specify|decide|check|verify|answer|reply|respond|let me|advise)|"
    r"(?:can|could|would|will) you\b|do you (?:want|prefer|need|agree|think|mind)|"
    r"would you (?:like|prefer|rather)|(?:should|shall|may|can) i\b|"
    r"want me to|like me to|(?:your|the) (?:call|choice)\b|up to you|"
    r"your (?:approval|go-ahead|go ahead|decision|confirmation|input|feedback|preference|"
    r"permission|review|answer|thoughts|ok|okay|sign-off)|"
    r"(?:wait|waiting|waits) (?:on|for) (?:you|your)|awaiting your|until you\b|hold off|"
    r"before i (?:proceed|continue|start|go ahead|apply|run|delete|push|merge|deploy)|"
    r"(?:if|once|when) you (?:approve|agree|confirm|want|prefer|like|'d like|would like|decide|"
    r"are ok|are happy|give|say|reply|let)|"
    r"i need (?:you|your|the|more|to know|access|a |an )|needs? your\b|need you to|"
    r"confirm (?:whether|that|if|the|which)|"
    r"pick (?:one|a |an |between|either)|choose (?:one|between|from|either)|"
    r"(?:which|what) (?:one|option|approach|way|of|do you|would you|should)|"
    r"any (?:preference|preferences|thoughts|objections|concerns|feedback)|"
    r"reply (?:with|yes|\"|')|(?:type|say|answer) (?:\"|')?yes|ok to (?:proceed|go|continue)|"
    r"(?:can|could) (?:either|also)\b[^.]*\bor\b|or (?:should|would|do|shall) (?:i|you|we)|"
    r"(?:i(?:'ve| have)? )?(?:paused|stopped here|stop here|waiting here)|"
    r"(?:point me|clarify|advise)\b"
    r")",
    re.IGNORECASE,
)
# A last sentence that opens like a question, even without its question mark.
_QUESTION_OPENER = re.compile(
    r"^(?:should|shall|would|could|can|do|does|did|is|are|was|were|will|may|might|which|"
    r"what|where|when|how|who|whom|whose|why|any|want|proceed|thoughts)\b",
    re.IGNORECASE,
)
_ASKS_ZH = re.compile(
    r"请确认|确认一下|麻烦确认|您确认|你确认|您希望|你希望|您想|你想|您倾向|你倾向|要不要|是否|"
    r"需要我|要我|请提供|提供一下|请告诉|告诉我|请选择|选一个|选择一个|选哪|您选|你选|"
    r"哪个|哪种|哪一|哪些|哪里|什么形式|怎么处理|如何处理|还是|您看|你看|"
    r"可以吗|好吗|行吗|对吗|是吗|能否|可否|能不能|可不可以|请问|"
    r"请审|审核|审阅|过目|批准|同意|请回复|回复.是|请指示|指示|请指定|请明确|请决定|"
    r"您决定|由您|拍板|等您|等待您|在等您|麻烦您|偏好|"
    r"请您|请你|贴一下|发给我|说明一下"
)
# 吗 / 呢 / 吧？ ending a clause is a question even when the question mark is missing.
_ZH_PARTICLE = re.compile(r"[吗呢么][\s。！!，,…~～]*(?:$|\n)|[吗呢][，,。！!]", re.MULTILINE)

_BLOCKED = re.compile(
    r"\b(?:"
    r"i(?:'m| am) (?:blocked|stuck)|blocked (?:on|by)|(?:is|are) blocked|"
    r"(?:can't|cannot|can not|unable to|could not|couldn't) (?:proceed|continue|go on|"
    r"make progress|finish|complete|run|implement|access|reach|connect)|"
    r"unable to continue|no way to|have to stop|must stop|impossible|"
    r"don't have (?:permission|access|the|a|an)|do not have (?:permission|access)|"
    r"permission denied|not permitted|i'm stuck|stuck on|nothing (?:more|else) i can do"
    r")",
    re.IGNORECASE,
)
_BLOCKED_ZH = re.compile(
    r"卡住|无法|做不了|跑不了|没办法|没有办法|被阻塞|阻塞|没有权限|无权|没能完成|只能先停|"
    r"暂时无法|进行不下去|继续不了"
)

_DONE = re.compile(
    r"\b(?:"
    r"all (?:\w+ )?(?:the )?(?:tasks|todos|to-dos|items|steps|changes|work)\b[^.]*?\b(?:are|is) "
    r"(?:now )?(?:done|complete|completed|finished)|"
    r"(?:i(?:'ve| have)? )?(?:finished|completed) (?:all|everything|the work|the task)\b|"
    r"everything (?:is|'s) (?:now )?(?:done|complete|finished|in place)|"
    r"(?:task|work|refactor|feature|migration|implementation) (?:is )?(?:now )?"
    r"(?:fully )?(?:complete|completed|done|finished)\b|"
    r"fully implemented|nothing (?:is )?left|wraps? (?:it|things) up|"
    r"everything\b[^.]*\b(?:has|have) been (?:handled|done|completed|addressed)|"
    r"nothing more to do|that's everything|"
    r"that is everything|all done|all set[.!\s]*$|^done\b[.!]"
    r")",
    re.IGNORECASE | re.MULTILINE,
)
_DONE_ZH = re.compile(
    r"全部完成|都已完成|已全部完成|都做完了|全部做完|全部搞定|搞定|大功告成|所有工作都已完成|"
    r"所有任务都已完成|任务完成|已清空|都已更新完毕|更新完毕|全部通过|^(?:已完成|完成了|做完了)[。！!]",
    re.MULTILINE,
)

# Talking to the user in a final reply is, in doubt, waiting for them.
_ADDRESS = re.compile(r"\b(?:you|your|yours|you'd|you're|you've|you'll|yourself)\b|您|你",
                      re.IGNORECASE)
_MORE_ASKS_EN = re.compile(
    r"\b(?:say the word|i'?d need|awaiting|hear back|hear from|give me|keen to hear|"
    r"happy to|glad to|judgement call|judgment call|align|agree on|sync on|discuss|"
    r"leave (?:it |that |this )?to|pending|decision|decide|undecided|open point|question|"
    r"to be decided|tbd|(?:on|with) (?:the |their |our )?[\w-]+ (?:side|team)|over to|shout|"
    r"ping me|once (?:the|it|that|this)|if (?:that|this|it) (?:works|helps|suits|looks)|"
    r"sign-off|green light|thoughts)\b",
    re.IGNORECASE,
)
_MORE_ASKS_ZH = re.compile(
    r"跟我说|说一声|通知我|发个话|一句话|给个建议|建议一下|意见|觉得|如果您|如果你|由您|来定|"
    r"对齐|商量|讨论|决定|待定|定下来|留给|审批|需要确认|挑一个|等.{0,6}(?:之后|以后|后)"
)
# Looked for in the last two sentences only: the carrying on must be what the reply ends with.
_CARRIES_ON = re.compile(
    r"\bnow (?:\w+ing|i|let|on|to|for|the)\b|\b\w+ing (?:[\w-]+ ){0,4}now\b|^\w+ing\b|"
    r"\b(?:i'll|i will|i'm going to|i am going to|we'll|let me|let's|next|moving on|"
    r"move on|on to|onto|continu\w*|start\w*|begin\w*|working on|tackling|time to|going to|"
    r"will|then|after that|proceed\w*|carry on|carrying on|in progress|first,? i)\b"
    r"|接下来|下一|下面|现在|开始|继续|正在|紧随其后|接着|然后|随后|我先|先从|先做|先看|"
    r"我去|我来|马上|这就|着手|处理第",
    re.IGNORECASE,
)

_SENTENCE_END = re.compile(r"(?<=[.!;。！；])\s*|\n+")


def read_intent(text: str) -> ReplyIntent:
    """Classify a final reply. Empty or unreadable text is ``ASKS``: never continue on doubt."""
    prose = _prose_tail(text).strip()
    if not prose:
        return ReplyIntent(Intent.ASKS, "no prose to read (in doubt: treated as a question)")
    for check in (_asks, _blocked, _done):
        found = check(prose)
        if found is not None:
            return found
    sign = _CARRIES_ON.search(_last_sentences(prose))
    if sign is None:
        return ReplyIntent(Intent.ASKS, "no sign that it carries on (in doubt: a question)")
    return ReplyIntent(Intent.CONTINUES, f"carries on: {_around(sign.string, sign)}")


def _prose_tail(text: str) -> str:
    prose = _FENCE.sub(" ", text)
    prose = _INLINE_CODE.sub("X", prose)
    prose = _URL.sub(" ", prose)
    return prose[-TAIL_CHARS:]


def _asks(prose: str) -> ReplyIntent | None:
    mark = _QUESTION_MARK.search(prose)
    if mark:
        return ReplyIntent(Intent.ASKS, f"asks a question: {_around(prose, mark)}")
    for pattern in (_ASKS_EN, _MORE_ASKS_EN, _ASKS_ZH, _MORE_ASKS_ZH, _ZH_PARTICLE, _ADDRESS):
        match = pattern.search(prose)
        if match:
            return ReplyIntent(Intent.ASKS, f"asks the user: {_around(prose, match)}")
    last = _last_sentence(prose)
    if _QUESTION_OPENER.match(last):
        return ReplyIntent(Intent.ASKS, f"its last sentence is a question: {last[:80]!r}")
    return None


def _blocked(prose: str) -> ReplyIntent | None:
    for pattern in (_BLOCKED, _BLOCKED_ZH):
        match = pattern.search(prose)
        if match:
            return ReplyIntent(Intent.BLOCKED, f"says it is blocked: {_around(prose, match)}")
    return None


def _done(prose: str) -> ReplyIntent | None:
    for pattern in (_DONE, _DONE_ZH):
        match = pattern.search(prose)
        if match:
            return ReplyIntent(Intent.DONE, f"says the work is done: {_around(prose, match)}")
    return None


def _sentences(prose: str) -> list[str]:
    stripped = (p.strip(" \t-*>#_") for p in _SENTENCE_END.split(prose.strip()))
    return [p for p in stripped if p]


def _last_sentence(prose: str) -> str:
    parts = _sentences(prose)
    return parts[-1] if parts else ""


def _last_sentences(prose: str, count: int = 2) -> str:
    return "\n".join(_sentences(prose)[-count:])


def _around(prose: str, match: re.Match[str], width: int = 40) -> str:
    at = match.start()
    start = max(0, at - width // 2)
    return repr(" ".join(prose[start : at + width].split()))
