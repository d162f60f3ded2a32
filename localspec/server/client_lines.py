"""Lines agents put in front of their prompts that change between requests and carry nothing
for the model, kept out of the prompt so that the cached prefix after them survives.

Each token's keys and values depend on every token before it: one changed token at the
start of a prompt makes all the rest of it new to the cache. Claude Code starts `system`
with its billing line, `x-anthropic-billing-header: cc_version=...; cc_entrypoint=...;` and,
in interactive use, `cch=<hash>;`, a hash that changes from request to request (the ~18k
tokens after it were processed again every turn). Anthropic's API reads the line off the
request; a local model has nothing to do with it.

Each rule is one entry of `RULES`: the client, the version it was seen in, where the line
must stand and its exact pattern, and what is done. A text that merely looks like one (the
line in a user message, after other text, or without the exact fields) is left alone.

Looked for and not found in the same clients (their recorded requests, `workloads/agents/`):
Codex CLI 0.171 and opencode 1.18 send nothing that changes per request in front of their
prompts; both carry the date (Codex in `<environment_context>`, opencode in its `<env>`
block), which changes once a day and tells the model something, so it is kept.

`serve --keep-client-headers` turns every rule off (`ServerState.keep_client_headers`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class VolatileLine:
    """A line one client sends that changes per request and means nothing to the model."""

    client: str
    seen_in: str
    where: str
    pattern: re.Pattern[str]
    done: str


CLAUDE_CODE_BILLING = VolatileLine(
    client="Claude Code",
    seen_in="2.1.197 (-p: no cch), 2.1.x interactive (cch changes per request)",
    where="the first text of a Messages request's `system` (its first block, or first line)",
    pattern=re.compile(
        r"x-anthropic-billing-header: cc_version=[^\s;]+; cc_entrypoint=[^\s;]+;"
        r"(?: [a-z_]+=[^\s;]*;)*"
    ),
    done="dropped (the block, or the line with its line break)",
)

RULES: tuple[VolatileLine, ...] = (CLAUDE_CODE_BILLING,)


def messages_system(system: Any) -> Any:
    """A Messages request's `system` without Claude Code's billing line, where it stands
    first: a first block that is the whole line is dropped, a string's first line goes with
    its line break. Anything else comes back as it was sent."""
    rule = CLAUDE_CODE_BILLING
    if isinstance(system, str):
        first, _, rest = system.partition("\n")
        return rest if rule.pattern.fullmatch(first) else system
    if isinstance(system, list) and system:
        first_block = system[0]
        if (
            isinstance(first_block, dict)
            and first_block.get("type") == "text"
            and isinstance(first_block.get("text"), str)
            and rule.pattern.fullmatch(first_block["text"])
        ):
            return system[1:]
    return system
