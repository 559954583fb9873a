"""PURE: what a turn's final reply says about who moves next.

The unfinished-todos guard may continue a turn only when its last reply carries on by itself.
A reply that asks the user anything, waits for a decision, says the work is done or says it is
blocked must never be followed by a continuation: the user, not autoretry, speaks next. The
detector is one-sided, so that a new way of asking can at worst be *missed*, never taken for
a continue sign:

1. Vetoes over the reply's tail (code fences, inline code and URLs removed): a question mark,
   the request phrasings of issue 9 ("let me know", "请确认" ...), any "you"/"your"/您/你,
   "blocked", "all done" ... -> ``ASKS`` / ``BLOCKED`` / ``DONE``.
2. Vetoes over the final paragraph: anything **conditional** (if, once, until, when, after,
   assuming, 如果, 的话, 等, 后我, 我就 ...), **negated** (not, no, without, n't, 不, 没, 未 ...),
   **waiting** (wait, pending, hold, for now, 暂停, 待 ...), **advising** (should, may, worth,
   consider, please, someone, 建议, 记得, 请 ...) or offering **options** -> ``ASKS``.
3. Only then a positive grammar on the final sentence(s) -> ``CONTINUES``:
   - first person + next step at the start of the last sentence or of a clause that follows
     statements ("Next I'll hook it in.", "Step 2 is complete; I'll tackle the indexes.",
     "接下来我把…", "路由守卫写好了，下一步我来…"); "<X> comes next";
   - a present-progressive line of work ("Running the suite to make sure ...", "正在…"): a
     verb of doing work heading a clause with no finite verb, not merely a word in -ing;
   - an action line that ends the reply with ":" / "：" ("Now let me update the tests:");
   - a neutral progress report: opens with a past-tense step just done ("Extracted the retry
     logic into retry.py.", "已把…", "修复了…"), claims nothing is done or verified (done,
     finished, all, every, passes, 完成, 全部, 通过 ...) unless it says work remains.
   Anything else is in doubt, and doubt is a question (``ASKS``).

Measured on ``tests/fixtures/reply_intent/`` by ``tests/test_reply_intent_corpus.py``.
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
# --- the positive grammar: what "carries on by itself" looks like ---------------------------
#
# Only the final sentences decide, and only these shapes count. A reply that matches none is
# in doubt, and doubt is a question: a new way to ask can at worst be missed as a continue
# sign, never mistaken for one.

# Words that may open a sentence before its subject: "Now I'll ...", "After that, let me ...".
_LEAD_EN = (
    r"(?:(?:so|and|ok|okay|right|now|next|then|first|after (?:that|this)|from here|"
    r"with [^,;:]{1,60}\b(?:done|in place|ready|finished|sorted|out of the way))[\s,:—–-]+)*"
)
# First person announcing its own next step, at the start of the last sentence.
_INTENT_EN = re.compile(
    _LEAD_EN + r"(?:i'll|i’ll|i will|i'm going to|i am going to|i'm gonna|let me|let's|"
    r"i'm (?:now )?(?:starting|moving|continuing|switching|turning|heading|working|going)|"
    r"next up (?:is|are)|next is|up next|now for|now the|now on|time to|on to|onto|"
    r"moving on|the next (?:thing|step|item|todo|task|one) is|next(?: step| up| thing)?\s*:)"
    r"(?:\b|(?<=:))",
    re.IGNORECASE,
)
# After "I'll", a verb that stays put is no next step ("I'll wait", "I'll leave it here").
_STAYS_EN = re.compile(
    r"\b(?:i'll|i’ll|i will|going to|gonna|let me|let's)\s+(?:\w+ly\s+)?(?:stop|wait|pause|"
    r"hold|leave|keep|be|need|have|hand|defer|let|check back|circle back|come back|revisit|"
    r"hear|stay|sit|park|look forward|assume|hope|try|also|just)\b",
    re.IGNORECASE,
)
# A clause before the sign must state something ("First todo is finished; I'll ..."), not
# tell the user what to do ("... — click Authorize there, and I'll pick up the token").
_STATEMENT_EN = re.compile(
    r"(?:i|i've|i'm|we|we've|it|it's|that|this|the|these|those|all|both|good|ok|okay|"
    r"[\w`'/.-]+(?: [\w`'/.-]+){0,5} (?:is|are|was|were|has|have|had|looks?|seems?|covers?|"
    r"confirms?|went|got|done|finished|complete|ready|in place))\b",
    re.IGNORECASE,
)
_CLAUSE_END_EN = re.compile(r"[,;:—–]+|\s-\s")
# "<the work> comes next", "<X> is next".
_NEXT_NOUN_EN = re.compile(r"^[\w\s`'/.-]{1,60}\b(?:comes|is|are) (?:up )?next\b", re.IGNORECASE)
# A sentence that opens with the agent's own work in the present progressive ("Running the
# suite ..."). A gerund alone is no sign ("Having migrated ...", "Pending your review ..."):
# only verbs of doing work count.
_WORK_GERUND_EN = re.compile(
    _LEAD_EN + r"(?:re-?)?(?:running|checking|looking|adding|switching|regenerating|generating|"
    r"fixing|digging|writing|rewriting|tracing|refactoring|cleaning|starting|moving|continuing|"
    r"updating|implementing|investigating|testing|building|creating|removing|replacing|"
    r"migrating|porting|wiring|profiling|debugging|applying|converting|extracting|renaming|"
    r"installing|reproducing|verifying|going through|working|tackling|handling|splitting|"
    r"adjusting|printing|patching|reading|searching|grepping|scanning|inspecting|examining|"
    r"comparing|measuring|benchmarking|deleting|editing|changing|modifying|setting up|hooking|"
    r"plugging|documenting|translating|formatting|linting|compiling|bumping|upgrading|pinning|"
    r"restructuring|reorganizing|simplifying|optimizing|filling in|tidying|trimming|"
    r"sorting out|narrowing|bisecting|isolating|instrumenting|beginning|knocking out|"
    r"porting)\b",
    re.IGNORECASE,
)
# A gerund that is the subject of a verb ("Switching the language updates the UI") says
# nothing about what the agent does: its head clause must have no finite verb.
_HEAD_CLAUSE_EN = re.compile(
    r"[,;:—–(]|\s-\s|\b(?:now that|since|because|so that|to|while|as|before|then)\b", re.IGNORECASE
)
_FINITE_VERB_EN = re.compile(
    r"\b(?:is|are|was|were|has|have|had|does|did|will|would|can|could|should|may|might|must|"
    r"\w+s (?:the|a|an|it|its|their|our|all|every|up|down|out|well|fine))\b",
    re.IGNORECASE,
)
# Any gerund opening a line that ends the reply with a colon ("Updating them:").
_GERUND_EN = re.compile(_LEAD_EN + r"[a-z-]+ing\b", re.IGNORECASE)
# A line ending the reply with a colon that opens with "Now", "Next", "Then", "First".
_LEAD_COLON_EN = re.compile(r"(?:now|next|then|first|and now)\b", re.IGNORECASE)
# Gerunds that describe a state, not work: no sign, even before a colon.
_STATE_GERUND_EN = re.compile(
    _LEAD_EN + r"(?:having|being|lacking|pending|awaiting|waiting|needing|missing|requiring|"
    r"holding|keeping|leaving|stopping|pausing|hoping|assuming|wanting|wondering|considering|"
    r"expecting|blocking|following|regarding|concerning|according|nothing|something|"
    r"checking in|running out|running low|"
    r"anything|everything)\b",
    re.IGNORECASE,
)
# A step just done, reported in the past tense with the subject left out ("Extracted the
# retry logic into retry.py."). Verbs that end, check or park the work do not count.
# Only forms that cannot be an imperative: "Put the token in .env" or "Seed the database"
# tell the user what to do.
_PAST_REPORT_EN = re.compile(
    r"(?:(?!(?:embed|shed|bed|wed|red)\b)[a-z]+(?<!e)ed|built|rebuilt|wrote|rewrote|made|ran|"
    r"reran)\b",
    re.IGNORECASE,
)
_ENDING_VERB_EN = re.compile(
    r"(?:finished|completed|wrapped|concluded|ended|closed|shipped|delivered|tried|attempted|"
    r"failed|stopped|paused|waited|needed|required|asked|decided|blocked|hoped|wanted|"
    r"noticed|realized|confirmed|verified|checked|tested|validated|proved|ensured|reviewed|"
    r"prepared|staged|drafted|left|kept|parked|deferred|postponed|skipped|ignored|dropped|"
    r"reached|pushed|merged|released|deployed|published|opened|raised|filed|submitted|"
    r"sent|handed|exposed|enabled)\b",
    re.IGNORECASE,
)
# Says outright that work remains ("the rest live in forms/", "still ahead", "14 of 22").
_REMAINS_EN = re.compile(
    r"\b(?:remaining|remain|remains|the rest|still (?:ahead|to do|needs?|on the list)|"
    r"halfway|half(?:way)? through|\d+ of (?:the )?\d+|more to go|left to do)\b",
    re.IGNORECASE,
)
# Claims that the work as a whole is finished: a report saying so is a ``done``.
_DONE_CLAIMS_EN = re.compile(
    r"\b(?:done|complete|completed|completes|finished|finish|all set|that's it|that is it|"
    r"wrapped|wraps|everything|everywhere|whole|entire|entirely|fully|final|finally|last|"
    r"ready|in place|is live|are live|now live|shipped|merged|released|deployed|good to go|"
    r"over|closed|summary|release|tagged|"
    r"all (?:\w+ )?(?:tests|checks|items|todos|tasks|steps|files|of them))\b",
    re.IGNORECASE,
)
# Claims that it was checked and works: a ``done`` too, unless the reply says more remains.
_VERIFIED_EN = re.compile(
    r"\b(?:every|all|green|pass|passes|passed|passing|clean|works|working|fixed|succeeded|"
    r"successful|successfully|verified|confirmed|tested)\b",
    re.IGNORECASE,
)

# Chinese: a clause that opens with the next step ("接下来我把…", "我现在去写…", "正在把…").
_INTENT_ZH = re.compile(
    r"^(?:那|好|好的)?[，,\s]*(?:接下来|下一步|下面|然后|现在|随后|接着|紧接着|这就|马上|立刻|"
    r"先|继续|开始|正在|着手|下一(?:步|项|个)|(?:处理|做|搞)第|"
    r"我(?:现在|这就|马上|立刻|接着|继续|先|来|去|打算|准备|开始|正在|会|要|将))"
)
_NEXT_NOUN_ZH = re.compile(r"紧随其后|排在后面|轮到")
# A clause before the sign must state what is done ("路由守卫写好了，下一步…"), not tell the
# user what to do ("按回车确认安装，我接着…").
_STATEMENT_ZH = re.compile(r"了|已|好|完|过|在|是|有|都|能|成|剩|就绪|不错")
# A step just done: "已把…", "修复了…", "把…改成了…".
_REPORT_ZH = re.compile(
    r"^(?:已经?|刚刚?|刚才)|^[\u4e00-\u9fff]{2}了|^(?:把|将).{1,40}?(?:改|换|拆|合|迁|接|加|删|补)|"
    r"^[^，,；;。]{1,40}?(?:已经?|[改换拆迁接加删补修写调][成到掉上]?了)"
)
_REMAINS_ZH = re.compile(r"还剩|剩下|剩余|其余|一半|还差|尚余|后面还")
_DONE_CLAIMS_ZH = re.compile(
    r"完成|完了|完毕|结束|搞定|全部|所有|到此|告一段落|收尾|就绪|好了|上线|发布|合入|合进|总结|"
    r"消失|生效|到位|落地|齐全"
)
_VERIFIED_ZH = re.compile(
    r"都|通过|验证|可用|没问题|正常|成功|齐|全绿|无误|妥|修好|修复|解决|一致|吻合|符合|平稳|稳定"
)

# --- what holds it back anywhere in the final paragraph -------------------------------------

_HOLDS_EN: dict[str, re.Pattern[str]] = {
    "conditional": re.compile(
        r"\b(?:if|unless|once|until|till|whenever|when|assuming|provided|providing|in case|"
        r"otherwise|as soon as|as long as|whether|after (?!that\b|this\b|which\b|\w+ing\b)|"
        r"before (?:i|we|you|they|anyone|someone|it|the|this|that|any|moving)\b)",
        re.IGNORECASE,
    ),
    "negated": re.compile(
        r"\b(?:not|no|never|nothing|none|nobody|neither|nor|without|cannot|unable|hardly)\b|"
        r"n['’]t\b",
        re.IGNORECASE,
    ),
    "waiting": re.compile(
        r"\b(?:wait\w*|await\w*|pending|hold\w*|paus\w*|stop\w*|block\w*|stuck|ready for|"
        r"standing by|stand by|idle|defer\w*|postpon\w*|for now|for the moment|later|"
        r"in the meantime|meanwhile)\b",
        re.IGNORECASE,
    ),
    "advice": re.compile(
        r"\b(?:may|might|could|would|should|must|ought|worth|recommend\w*|suggest\w*|"
        r"consider\w*|make sure|keep in mind|remember|note that|heads up|watch|careful|"
        r"be aware|advis\w*|tip|follow-up|followup|someone|anyone|somebody|anybody|team|"
        r"please|thanks|thank|sorry|hope|feel free)\b",
        re.IGNORECASE,
    ),
    "options": re.compile(
        r"\b(?:options?|alternatives?|either|choices?|ways|approaches|trade-?offs?|versus|vs)\b",
        re.IGNORECASE,
    ),
    # Someone else's step, or a step that needs someone's say: not the agent carrying on.
    "handing over": re.compile(
        r"\b(?:requires?|required|needs? (?:to be|an?|the|some|your|their)\b|has to|have to|"
        r"approv\w*|sign-?off|review\w*|permission|access|credentials?|admin\w*|"
        r"hand\w* (?:\w+ )?over|over to|pass\w* (?:\w+ )?(?:on|over)|up to|"
        r"run(?:ning)? (?:out|low)|ran out)\b",
        re.IGNORECASE,
    ),
    # A summary closes the work; it is not the next step.
    "wrapping up": re.compile(
        r"\b(?:summar\w*|recap\w*|overview|wrap\w* up|to sum up|in short|overall|"
        r"here(?:'s| is| are) what|close\w* (?:\w+ )?out|call it|signs? off|signed off|"
        r"log\w* off|report back|end (?:here|there|it|this|the session)|that's all|conclud\w*|"
        r"finish\w* up|wrap\w*)\b",
        re.IGNORECASE,
    ),
}
_HOLDS_ZH: dict[str, re.Pattern[str]] = {
    "conditional": re.compile(
        r"如果|要是|的话|只要|除非|否则|一旦|假如|倘若|若|之后才|后才|才能|才可以|才会|(?<![然随])后[，,]?我|"
        r"我就|就会|再说|之前|以前|前先|看情况|视情况|是否"
    ),
    # 不足 / 不同 / 不少 ... are words of their own, not a negation.
    "negated": re.compile(r"不(?!足|同|少|错|断|仅)|没|无|未|别|非|莫|勿"),
    "waiting": re.compile(r"等|暂停|停|待(?!办)|搁置|卡|阻塞|稍后|回头再|晚点|先这样|放着|留着"),
    "advice": re.compile(
        # 可以 is "you may / it can now": advice or permission, as "may" and "could" are above.
        r"建议|记得|别忘|提醒|注意|留意|关注|观察|考虑|最好|应该|需要|得|务必|有空|以后|可以|请(?!求)|麻烦|"
        r"帮忙|帮我|回我|发我|给我|告诉我|通知我|跟我说|找我|谢谢|感谢|抱歉|希望"
    ),
    "options": re.compile(r"方案|选项|做法|解法|选择|或者|还是|要么|二选一"),
    "handing over": re.compile(
        r"由[^，,。；;]{1,8}?(?:来|负责|处理|决定|确认|定)|交给|交由|让(?!它|其)|轮到|留给|审批|批准|权限|运维|同学|同事|团队|管理员"
    ),
    "wrapping up": re.compile(
        r"总结|摘要|小结|汇总|回顾|概述|到这里|到此|结束|收工|就这样|收尾|汇报"
    ),
}
# A Chinese line ending with a colon that introduces what is needed, not what it does next.
_NEEDS_LIST_ZH = re.compile(r"以下|如下|下列|缺|需")

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_LIST_OR_HEADING = re.compile(r"^\s*(?:[-*+•]|\d+[.)]|#)")
_SENTENCE_END = re.compile(r"(?<=[.!])\s+|(?<=[。！])\s*|\n+")
_CLAUSE_END_ZH = re.compile(r"[，,；;：:—]+")
_CJK = re.compile(r"[\u4e00-\u9fff]")


def read_intent(text: str) -> ReplyIntent:
    """Classify a final reply. Empty or unreadable text is ``ASKS``: never continue on doubt."""
    prose = _prose_tail(text).strip()
    if not prose:
        return ReplyIntent(Intent.ASKS, "no prose to read (in doubt: treated as a question)")
    for check in (_asks, _blocked, _done):
        found = check(prose)
        if found is not None:
            return found
    final = _final_paragraph(prose)
    held = _held_back(final)
    if held is not None:
        return ReplyIntent(Intent.ASKS, held)
    sign = _carries_on(final, ends_with_colon=text.rstrip().endswith((":", "：")))
    if sign is None:
        return ReplyIntent(Intent.ASKS, "no sign that it carries on (in doubt: a question)")
    return ReplyIntent(Intent.CONTINUES, f"carries on: {sign}")


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




def _final_paragraph(prose: str) -> str:
    """The last paragraph; a closing list or heading brings the paragraph before it along."""
    paragraphs = [p.strip() for p in _PARAGRAPH_BREAK.split(prose) if p.strip()]
    final = paragraphs[-1]
    if len(paragraphs) > 1 and _LIST_OR_HEADING.match(final):
        final = paragraphs[-2] + "\n\n" + final
    return final


def _held_back(final: str) -> str | None:
    """A condition, negation, wait, advice, offer of options or failure in the final paragraph:
    the reply hands over to the user (or says it cannot go on)."""
    for table in (_HOLDS_EN, _HOLDS_ZH):
        for name, pattern in table.items():
            match = pattern.search(final)
            if match:
                return f"its final paragraph is {name}: {_around(final, match)}"
    return None


def _carries_on(final: str, *, ends_with_colon: bool) -> str | None:
    """The positive sign in the final sentences, or None (in doubt)."""
    sentences = _sentences(final)
    if not sentences:
        return None
    last = sentences[-1]
    if _CJK.search(last):
        return _carries_on_zh(sentences, ends_with_colon=ends_with_colon)
    return _carries_on_en(sentences, ends_with_colon=ends_with_colon)


def _carries_on_en(sentences: list[str], *, ends_with_colon: bool) -> str | None:
    last = sentences[-1]
    if _STAYS_EN.search(last):
        return None
    clauses = [c.strip() for c in _CLAUSE_END_EN.split(last) if c.strip()]
    for at, clause in enumerate([last, *clauses]):
        before = clauses[: at - 1] if at else []
        if not all(_STATEMENT_EN.match(c) or _PAST_REPORT_EN.match(c) for c in before):
            break
        if _INTENT_EN.match(clause) or _NEXT_NOUN_EN.match(clause):
            return f"announces its next step: {clause[:80]!r}"
        if _opens_with_gerund(clause, _WORK_GERUND_EN):
            return f"says what it is doing: {clause[:80]!r}"
    if ends_with_colon and (_opens_with_gerund(last, _GERUND_EN) or _LEAD_COLON_EN.match(last)):
        return f"an action line ending with a colon: {last[:80]!r}"
    return _progress_report_en(sentences)


def _opens_with_gerund(sentence: str, gerund: re.Pattern[str]) -> bool:
    """'Running the suite to make sure ...': a gerund heading a clause with no finite verb."""
    if not gerund.match(sentence) or _STATE_GERUND_EN.match(sentence):
        return False
    head = _HEAD_CLAUSE_EN.split(sentence, maxsplit=1)[0]
    return not _FINITE_VERB_EN.search(head)


def _progress_report_en(sentences: list[str]) -> str | None:
    """A step just done, reported without claiming the whole work is done."""
    first = sentences[0]
    if not _PAST_REPORT_EN.match(first) or _ENDING_VERB_EN.match(first):
        return None
    text = " ".join(sentences).split(maxsplit=1)[-1]  # the claims after its opening verb
    if _DONE_CLAIMS_EN.search(text):
        return None
    if _VERIFIED_EN.search(text) and not _REMAINS_EN.search(text):
        return None
    return f"reports a step just done: {first[:80]!r}"


def _carries_on_zh(sentences: list[str], *, ends_with_colon: bool) -> str | None:
    last = sentences[-1]
    clauses = [c.strip() for c in _CLAUSE_END_ZH.split(last) if c.strip()]
    for at, clause in enumerate(clauses):
        sign = _INTENT_ZH.match(clause) or _NEXT_NOUN_ZH.search(clause)
        if sign and all(_STATEMENT_ZH.search(c) for c in clauses[:at]):
            return f"announces its next step: {clause[:60]!r}"
    if ends_with_colon and not _NEEDS_LIST_ZH.search(last):
        return f"an action line ending with a colon: {last[:60]!r}"
    first = sentences[0]
    text = "".join(sentences)
    if not _REPORT_ZH.match(first) or _DONE_CLAIMS_ZH.search(text):
        return None
    if _VERIFIED_ZH.search(text) and not _REMAINS_ZH.search(text):
        return None
    return f"reports a step just done: {first[:60]!r}"


def _sentences(prose: str) -> list[str]:
    stripped = (p.strip(" \t-*>#_") for p in _SENTENCE_END.split(prose.strip()))
    return [p for p in stripped if p]


def _last_sentence(prose: str) -> str:
    parts = _sentences(prose)
    return parts[-1] if parts else ""


def _around(prose: str, match: re.Match[str], width: int = 40) -> str:
    at = match.start()
    start = max(0, at - width // 2)
    return repr(" ".join(prose[start : at + width].split()))
