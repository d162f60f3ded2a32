"""`localspec bench prompt`: how long a long prompt takes, `localspec serve` against
llama-server, side by side on the same prompts.

An agent's turn is mostly prompt (6-19k tokens of instructions, tools and files), so the time
to process one is what a user of an agent waits for first. For each size (default 4,096,
8,192 and 16,384 tokens) and repeat, every contender processes the same prompt, new to it:
token ids sent to llama.cpp's `/completion` with `cache_prompt` false and one token to
generate, led by a line naming the run, the size, the repeat and the phase, and taken from a
different place of the text each time, so that no cache (a slot's, a RAM or disk store,
chunk reuse) holds any of it. The contenders take turns, who goes first alternating per
repeat, so that a slow minute of the shared machine falls on both; `localspec bench prompt`
starts both afresh for every repeat, because a process's speed depends on where its memory
happens to lie (one program, one setting, four processes: 86 to 94 tokens/s, each within 2%
of itself over three prompts), which repeats in one process never average out.

With `editor_every_s`, each prompt is processed a second time (another new prompt of the same
size) while an editor sends one llama.vim completion every that many seconds, from
`EDITOR_DELAY_S` after the prompt was sent until it is answered: how much the editor's
requests cost the prompt, and how long each completion took meanwhile. llama-server then
runs 2 slots, so that it can serve a completion while it processes the prompt.

Reported per size and phase: each contender's round trip (the client's clock: the wait for
the first token, which is what a user meets), the tokens it processed and its own prompt_ms,
and the median over repeats of localspec's round trip over llama-server's on the same prompt
with its range: identical work differs by up to 15% between single runs on a shared machine.
"""

from __future__ import annotations

import secrets
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from localspec.bench.contender import Skipped
from localspec.bench.editor import Reply, read_reply
from localspec.bench.server_process import (
    FAILURES,
    REQUEST_TIMEOUT_S,
    InBackground,
    failure_text,
)

DEFAULT_SIZES = (4096, 8192, 16384)
DEFAULT_REPEATS = 3
EDITOR_DELAY_S = 1.0
"""From sending the prompt to the first completion: the prompt is under way by then."""
PROMPT_TIMEOUT_S = 3 * REQUEST_TIMEOUT_S
"""A hang guard for one prompt: 16k tokens take ~7 minutes on a 2-core CPU."""
ALONE, WITH_EDITOR = "alone", "with editor"


class Contender(Protocol):
    """What the bench needs of a server (`server_process.ServerProcess`; tests run real ones)."""

    name: str

    def request_json(self, path: str, body: dict[str, Any] | None, timeout: float) -> Any: ...

    def post(self, path: str, body: dict[str, Any] | None) -> tuple[Any, float]: ...

    def log_tail(self, lines: int = 5) -> str: ...


@dataclass(frozen=True)
class PromptRun:
    """One contender's prompt: its size, repeat and phase, and what it took."""

    name: str
    size: int
    repeat: int
    phase: str
    reply: Reply
    completions: tuple[Reply, ...] = ()  # the editor's, sent while the prompt ran

    @property
    def seconds(self) -> float:
        return self.reply.seconds


@dataclass
class PromptSpeedResult:
    runs: list[PromptRun] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def prompt_tokens(
    text_ids: Sequence[int], lead: Sequence[int], size: int, offset: int
) -> list[int]:
    """`size` tokens: `lead`, then the text's tokens from `offset` on (wrapping around)."""
    body = size - len(lead)
    if body < 1 or not text_ids:
        raise ValueError(f"a {size}-token prompt cannot follow a {len(lead)}-token lead")
    start = offset % len(text_ids)
    taken = [text_ids[(start + i) % len(text_ids)] for i in range(body)]
    return [*lead, *taken]


def completion_body(tokens: Sequence[int]) -> dict[str, Any]:
    """The prompt as llama.cpp's `/completion` takes it from both servers: token ids, no
    cached prefix used, greedy, one token generated."""
    return {
        "prompt": list(tokens),
        "n_predict": 1,
        "cache_prompt": False,
        "temperature": 0.0,
        "seed": 0,
    }


def tokenize(server: Contender, text: str) -> list[int]:
    """The text's token ids, by the server's own tokenizer (both serve the same model)."""
    answer = server.request_json("/tokenize", {"content": text}, REQUEST_TIMEOUT_S)
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(token, int) for token in tokens):
        raise ValueError(f"/tokenize answered without token ids: {str(answer)[:200]}")
    return tokens


def timed_prompt(server: Contender, tokens: Sequence[int]) -> Reply:
    started = time.perf_counter()
    answer = server.request_json("/completion", completion_body(tokens), PROMPT_TIMEOUT_S)
    return read_reply(answer, time.perf_counter() - started)


def prompt_with_editor(
    server: Contender,
    tokens: Sequence[int],
    completions: Sequence[dict[str, Any]],
    every_s: float,
    delay_s: float = EDITOR_DELAY_S,
) -> tuple[Reply, list[Reply]]:
    """The prompt on a thread and, from `delay_s` after sending it until it is answered,
    one completion every `every_s` seconds (the next one `every_s` after the last came
    back): the prompt's reply and the completions'."""
    prompt = InBackground(f"prompt {server.name}", lambda: timed_prompt(server, tokens))
    replies: list[Reply] = []
    try:
        wait_s = delay_s
        while not prompt.done.wait(wait_s):
            body = completions[len(replies) % len(completions)]
            replies.append(read_reply(*server.post("/infill", body)))
            wait_s = every_s
    finally:
        prompt.join(PROMPT_TIMEOUT_S)
    return prompt.result("the prompt", PROMPT_TIMEOUT_S), replies


@dataclass(frozen=True)
class PromptSpeedOptions:
    sizes: tuple[int, ...] = DEFAULT_SIZES
    repeats: int = DEFAULT_REPEATS
    editor_every_s: float | None = None  # None: no phase with an editor
    editor_delay_s: float = EDITOR_DELAY_S


Done = Callable[[PromptRun], None]


@dataclass(frozen=True)
class PromptCase:
    """One prompt every contender processes: its size, repeat, phase and tokens."""

    size: int
    repeat: int
    phase: str
    tokens: tuple[int, ...]


def prompt_cases(server: Contender, text: str, options: PromptSpeedOptions) -> list[PromptCase]:
    """Every size, repeat and phase's prompt, tokenized by `server`: each led by a line
    naming this run and the case, and taken from its own place of `text`."""
    text_ids = tokenize(server, text)
    run_id = secrets.token_hex(4)  # another run's prompts (a disk store keeps them) are not this
    phases = [ALONE] + ([WITH_EDITOR] if options.editor_every_s is not None else [])
    cases: list[PromptCase] = []
    for size in options.sizes:
        for repeat in range(options.repeats):
            for phase in phases:
                lead = tokenize(server, f"# bench prompt {run_id}: {size} {repeat} {phase}\n")
                tokens = prompt_tokens(text_ids, lead, size, offset=len(cases) * 7919)
                cases.append(PromptCase(size, repeat, phase, tuple(tokens)))
    return cases


def run_prompt_speed(
    servers: Sequence[Contender],
    text: str,
    completions: Sequence[dict[str, Any]],
    options: PromptSpeedOptions,
    done: Done = lambda _run: None,
    *,
    cases: Sequence[PromptCase] | None = None,
) -> PromptSpeedResult:
    """Every case on every server (`cases`, or all of `prompt_cases`, which the first
    server tokenizes), taking turns (who goes first alternates per repeat); a server that
    fails is dropped, saying why."""
    result = PromptSpeedResult()
    active = list(servers)
    if cases is None:
        cases = prompt_cases(servers[0], text, options) if servers else []
    for case in cases:
        for server in list(active if case.repeat % 2 == 0 else active[::-1]):
            try:
                run = _one(server, case, completions, options)
            except FAILURES as exc:
                why = f"{case.size} tokens, {case.phase}: {failure_text(exc)}"
                result.skipped.append(Skipped(server.name, f"{why}; log: {server.log_tail()}"))
                active.remove(server)
                continue
            result.runs.append(run)
            done(run)
    return result


def _one(
    server: Contender,
    case: PromptCase,
    completions: Sequence[dict[str, Any]],
    options: PromptSpeedOptions,
) -> PromptRun:
    every_s = options.editor_every_s
    if case.phase == ALONE or every_s is None:
        reply = timed_prompt(server, case.tokens)
        return PromptRun(server.name, case.size, case.repeat, case.phase, reply)
    reply, replies = prompt_with_editor(
        server, case.tokens, completions, every_s, options.editor_delay_s
    )
    return PromptRun(server.name, case.size, case.repeat, case.phase, reply, tuple(replies))


@dataclass(frozen=True)
class Summary:
    """One size and phase of one contender, over the repeats."""

    name: str
    size: int
    phase: str
    seconds: tuple[float, ...]
    processed: tuple[int, ...]
    completion_s: tuple[float, ...]  # every completion's round trip, all repeats

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def tokens_per_s(self) -> float:
        return self.size / self.median_s if self.median_s > 0 else 0.0


def summarise(runs: Sequence[PromptRun]) -> list[Summary]:
    keys = list(dict.fromkeys((run.name, run.size, run.phase) for run in runs))
    summaries = []
    for name, size, phase in keys:
        picked = [r for r in runs if (r.name, r.size, r.phase) == (name, size, phase)]
        summaries.append(
            Summary(
                name,
                size,
                phase,
                tuple(r.seconds for r in picked),
                tuple(r.reply.prompt_n for r in picked),
                tuple(c.seconds for r in picked for c in r.completions),
            )
        )
    return summaries


def ratios(runs: Sequence[PromptRun], name: str, base: str, size: int, phase: str) -> list[float]:
    """Per repeat, `name`'s round trip over `base`'s on the same prompt."""
    times = {(r.name, r.repeat): r.seconds for r in runs if (r.size, r.phase) == (size, phase)}
    return [
        times[name, repeat] / times[base, repeat]
        for (who, repeat) in times
        if who == name and (base, repeat) in times and times[base, repeat] > 0
    ]
