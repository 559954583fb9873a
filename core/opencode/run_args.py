"""Pure reading of an ``opencode run`` command line (OpenCode 1.18 ``run --help``) for exec.

``autoretry exec -- opencode run [options] message…`` needs to know which session the run
works on (``--session``, ``--continue``, ``--fork``), where (``--dir``), what it asked (the
message, to tell sessions apart) and which options a continuation must repeat (``--format``,
logging, ``--thinking``, ``--auto``) or replace with the turn's own (``--model``, ``--agent``,
``--variant``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: Options that take a value (short aliases mapped to their long name).
VALUE_OPTIONS = {
    "--log-level": "--log-level", "--command": "--command", "--session": "--session",
    "-s": "--session", "--model": "--model", "-m": "--model", "--agent": "--agent",
    "--format": "--format", "--file": "--file", "-f": "--file", "--title": "--title",
    "--attach": "--attach", "--password": "--password", "-p": "--password",
    "--username": "--username", "-u": "--username", "--dir": "--dir", "--port": "--port",
    "--variant": "--variant",
}
FLAG_OPTIONS = {
    "--print-logs": "--print-logs", "--pure": "--pure", "--continue": "--continue",
    "-c": "--continue", "--fork": "--fork", "--share": "--share", "--thinking": "--thinking",
    "--interactive": "--interactive", "-i": "--interactive", "--auto": "--auto",
    "--help": "--help", "-h": "--help", "--version": "--version", "-v": "--version",
}
#: Repeated on every continuation, so it behaves (and prints) like the run it continues.
KEPT_VALUES = ("--log-level", "--format", "--dir")
KEPT_FLAGS = ("--print-logs", "--thinking", "--auto")
#: Not headless, or not run by this process: exec refuses them (usage error).
REFUSED = {
    "--attach": "runs on another OpenCode server, whose bridge the daemon recovers",
    "--interactive": "is interactive, not a headless run",
    "--help": "prints help, it runs nothing",
    "--version": "prints the version, it runs nothing",
}


class RunArgsError(ValueError):
    """The command is not an ``opencode run`` exec can drive (exit status 2)."""


@dataclass(frozen=True)
class RunArgs:
    program: str
    values: dict[str, str] = field(default_factory=dict)  # long option -> last value
    flags: frozenset[str] = frozenset()
    message: tuple[str, ...] = ()

    @property
    def session(self) -> str | None:
        return self.values.get("--session")

    @property
    def forks(self) -> bool:
        return "--fork" in self.flags

    @property
    def directory(self) -> str | None:
        return self.values.get("--dir")

    @property
    def text(self) -> str:
        return " ".join(self.message)

    def continuation(
        self, session_id: str, text: str, *, model: str | None, agent: str | None,
        variant: str | None,
    ) -> list[str]:
        """``opencode run --session ID`` with the turn's model, agent and variant."""
        # ``--name=value`` as one word: a value from the DB (a model or agent name) or the
        # command line that starts with "-" would be read as another option (issue 20).
        argv = [self.program, "run", "--session", session_id]  # our own id: "ses_…"
        for name, value in (("--model", model), ("--agent", agent), ("--variant", variant)):
            if value:
                argv.append(f"{name}={value}")
        argv += [f"{name}={self.values[name]}" for name in KEPT_VALUES if name in self.values]
        argv += [name for name in KEPT_FLAGS if name in self.flags]
        # `opencode run` wraps an argument holding a space in double quotes before it joins
        # them (measured on 1.18.33): one word per argument sends the text unquoted. yargs
        # reads a word that starts with "-" as an option unless it follows "--".
        words = text.split()
        return [*argv, "--", *words] if any(w.startswith("-") for w in words) else [*argv, *words]

    @property
    def sent_text(self) -> str:
        """The message as ``opencode run`` stores it (arguments with a space quoted)."""
        return " ".join(f'"{m}"' if " " in m else m for m in self.message)


def is_opencode(program: str) -> bool:
    name = Path(program).name
    return name in ("opencode", "opencode.exe") or name.startswith("opencode-")


def parse_run(argv: Sequence[str]) -> RunArgs:
    """The command line after ``autoretry exec --``; raises RunArgsError when exec cannot
    drive it."""
    if not argv:
        raise RunArgsError("no command given: autoretry exec -- opencode run [options] \"task\"")
    if not is_opencode(argv[0]) or len(argv) < 2 or argv[1] != "run":
        shown = " ".join(argv[:2])
        raise RunArgsError(f"not an OpenCode run: {shown!r} (exec drives `opencode run …` only)")
    values: dict[str, str] = {}
    flags: set[str] = set()
    message: list[str] = []
    rest = list(argv[2:])
    while rest:
        token = rest.pop(0)
        if token == "--":
            message += rest
            break
        name, eq, inline = token.partition("=")
        if name in VALUE_OPTIONS:
            if not eq and not rest:
                raise RunArgsError(f"{name} needs a value")
            values[VALUE_OPTIONS[name]] = inline if eq else rest.pop(0)
        elif token in FLAG_OPTIONS:
            flags.add(FLAG_OPTIONS[token])
        elif token.startswith("--no-") and f"--{token[5:]}" in FLAG_OPTIONS:
            flags.discard(FLAG_OPTIONS[f"--{token[5:]}"])
        else:
            message.append(token)
    for name, why in REFUSED.items():
        if name in values or name in flags:
            raise RunArgsError(f"opencode run {name} {why}; autoretry exec cannot drive it")
    if values.get("--format", "default") not in ("default", "json"):
        raise RunArgsError(f"--format must be default or json, got {values['--format']!r}")
    return RunArgs(argv[0], values, frozenset(flags), tuple(message))
