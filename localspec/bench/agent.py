"""`localspec bench agent`: coding agents' recorded requests replayed, plain decoding against
speculation, turn by turn.

Agents re-send whole files, tool results and earlier answers every turn, which is where
n-gram drafts should pay most, and their requests cannot be written by hand: they are
recorded from the agents themselves (`serve --record`; the shipped traces are Claude Code,
Codex CLI and opencode doing small tasks on a scratch repository). Each request goes to one
`localspec serve` process once per mode, with the mode as the request's `spec` and the modes'
order shuffled per turn and repeat: the first of them pays the prompt (the others find it in
the cache), and prompt time is reported apart from decoding, which is what the modes change.
The prompt work of each turn is reported against the tokens the turn added to the
conversation (`prompt_work`), so that a prefix processed again shows as a number.

What the replay changes in the recorded bodies, and why:
- `stream` false: the answer's statistics are read from its `localspec` object.
- `temperature` 0: greedy, every mode gives the same tokens (speculation is exact), so decoding
  times compare the same work; an agent's own sampling would make each mode's answer differ.
- the answer's length capped at `max_tokens` (default 256): agents ask for up to 32,000 and a
  small model may ramble; tool calls end well within it.
"""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localspec.bench.modes import MODIFIERS, parse_mode
from localspec.bench.server_process import failure_text
from localspec.context_files import RESULTS_LIMIT, read_text_file
from localspec.errors import ContextFileError, UsageError
from localspec.speculative.settings import SpecSettings

LENGTH_FIELDS = {
    "/v1/messages": "max_tokens",
    "/v1/responses": "max_output_tokens",
}
DEFAULT_MAX_TOKENS = 256


@dataclass(frozen=True)
class AgentTurn:
    """One recorded request: the agent (the trace's name), its endpoint and body."""

    agent: str
    index: int
    path: str
    body: dict[str, Any]

    @property
    def kind(self) -> str:
        return turn_kind(self.path, self.body)


def turn_kind(path: str, body: dict[str, Any]) -> str:
    """`side` (no tools: a title or summary), `first` (the user's task), or `tool` (the turn
    after a tool's result, where files come back)."""
    if not body.get("tools"):
        return "side"
    items = body.get("messages") if path != "/v1/responses" else body.get("input")
    last = items[-1] if isinstance(items, list) and items else {}
    if not isinstance(last, dict):
        return "first"
    if last.get("role") == "tool" or last.get("type") == "function_call_output":
        return "tool"
    content = last.get("content")
    if isinstance(content, list) and any(
        isinstance(part, dict) and part.get("type") == "tool_result" for part in content
    ):
        return "tool"
    return "first"


def load_trace(path: Path) -> list[AgentTurn]:
    """A `serve --record` file's requests; the agent's name is the file's stem."""
    try:
        lines = read_text_file(path, f"the trace {path}", RESULTS_LIMIT).splitlines()
    except ContextFileError as exc:
        raise UsageError(f"{exc}: record a session with `localspec serve --record FILE`") from exc
    turns = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
            turns.append(AgentTurn(path.stem, number, record["path"], dict(record["body"])))
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise UsageError(
                f"{path}:{number} is not a `serve --record` line ({exc}): record a session "
                f"with `localspec serve --record FILE`"
            ) from exc
    if not turns:
        raise UsageError(f"the trace {path} holds no requests")
    return turns


def shipped_traces(*, interactive: bool = False) -> list[Path]:
    """The shipped traces: the clients run once on a task (`claude -p`, `codex exec`,
    `opencode run`), or `interactive`: in their own terminal UIs, two questions a session,
    with the side requests they send there (titles, topic checks) and Claude Code's billing
    line changing per request."""
    folder = Path(__file__).resolve().parent.parent / "workloads" / "agents"
    return sorted((folder / "interactive" if interactive else folder).glob("*.jsonl"))


def spec_object(mode: str, *, learn: bool) -> dict[str, Any]:
    """The request's `spec` for a bench mode name (`localspec.bench.modes`): its mode and the
    settings its modifiers set (`auto+no-suffix`: suffix_drafts false; always sent, since a
    bench's server drafts none unless asked), the server's own elsewhere; `learn` false
    keeps the answer out of the server's n-gram cache and suffix store."""
    spec = parse_mode(mode).spec
    if spec is None:
        raise UsageError(f"mode {mode!r}: `bench agent` runs localspec's own modes")
    settings: dict[str, Any] = {"mode": spec.mode.value, "learn": learn}
    plain = SpecSettings(spec.mode)
    for name in MODIFIERS.values():
        if getattr(spec, name) != getattr(plain, name):
            settings[name] = getattr(spec, name)
    settings["suffix_drafts"] = spec.suffix_drafts
    return settings


def replayed(turn: AgentTurn, mode: str, max_tokens: int, *, learn: bool = True) -> dict[str, Any]:
    """The body the replay sends (see the module's docstring)."""
    spec = spec_object(mode, learn=learn)
    body = {**turn.body, "stream": False, "temperature": 0, "spec": spec}
    body.pop("stream_options", None)
    length = LENGTH_FIELDS.get(turn.path, "max_tokens")
    asked = body.get(length) or body.get("max_completion_tokens")
    body.pop("max_completion_tokens", None)
    body[length] = min(asked, max_tokens) if isinstance(asked, int) and asked > 0 else max_tokens
    return body


@dataclass(frozen=True)
class TurnResult:
    """What one mode did on one turn, from the answer's `localspec` object."""

    agent: str
    index: int
    kind: str
    mode: str
    repeat: int
    prompt_tokens: int
    cached_tokens: int
    generated: int
    prefill_s: float
    decode_s: float
    drafted: int
    accepted: int
    round_trip_s: float


def read_result(turn: AgentTurn, mode: str, repeat: int, answer: Any, seconds: float) -> TurnResult:
    stats = answer.get("localspec") if isinstance(answer, dict) else None
    if not isinstance(stats, dict):
        raise UsageError(f"{turn.agent} turn {turn.index}: the answer has no statistics")
    return TurnResult(
        turn.agent,
        turn.index,
        turn.kind,
        mode,
        repeat,
        int(stats.get("prompt_tokens", 0)),
        int(stats.get("cached_tokens", 0)),
        int(stats.get("generated_tokens", 0)),
        float(stats.get("prefill_s", 0.0)),
        float(stats.get("generation_s", 0.0)),
        int(stats.get("drafted", 0)),
        int(stats.get("accepted", 0)),
        seconds,
    )


Post = Callable[[str, dict[str, Any]], tuple[Any, float]]


@dataclass
class AgentRun:
    results: list[TurnResult] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def replay(
    turns: Sequence[AgentTurn],
    modes: Sequence[str],
    *,
    repeats: int,
    max_tokens: int,
    post: Post,
    done: Callable[[TurnResult], None] = lambda _result: None,
    seed: int = 0,
    session: Callable[[int], None] = lambda _repeat: None,
) -> AgentRun:
    """Every turn in every mode, turn by turn in the recorded order (each turn's prompt is
    built on the last, as the agent sent them), the modes shuffled per turn and repeat.

    Only the last mode of a turn teaches the server's suffix store its answer: every mode
    of the next turn drafts from the earlier turns, none from another mode's answer to its
    own turn (the answers are the same: greedy, exact). `session(repeat)` is called before
    each repeat: the caller starts a fresh server there, whose store knows no answer yet."""
    rng = random.Random(seed)
    run = AgentRun()
    for repeat in range(repeats):
        session(repeat)
        for turn in turns:
            order = list(modes)
            rng.shuffle(order)
            for position, mode in enumerate(order):
                body = replayed(turn, mode, max_tokens, learn=position == len(order) - 1)
                try:
                    answer, seconds = post(turn.path, body)
                    result = read_result(turn, mode, repeat, answer, seconds)
                except (OSError, ValueError, UsageError) as exc:
                    run.failures.append(
                        f"{turn.agent} turn {turn.index} ({mode}): {failure_text(exc)}"
                    )
                    continue
                run.results.append(result)
                done(result)
    return run


@dataclass(frozen=True)
class Row:
    """One turn kind (or all) under one mode: tokens, decoding time, speed, acceptance."""

    kind: str
    mode: str
    turns: int
    generated: int
    decode_s: float
    drafted: int
    accepted: int
    prompt_processed: int
    prefill_s: float

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.decode_s if self.decode_s > 0 else 0.0


def summarise(results: Sequence[TurnResult], modes: Sequence[str]) -> list[Row]:
    kinds = [*sorted({result.kind for result in results}), "all"]
    rows = []
    for kind in kinds:
        for mode in modes:
            picked = [r for r in results if r.mode == mode and kind in ("all", r.kind)]
            if not picked:
                continue
            rows.append(
                Row(
                    kind,
                    mode,
                    len(picked),
                    sum(r.generated for r in picked),
                    sum(r.decode_s for r in picked),
                    sum(r.drafted for r in picked),
                    sum(r.accepted for r in picked),
                    sum(r.prompt_tokens - r.cached_tokens for r in picked),
                    sum(r.prefill_s for r in picked),
                )
            )
    return rows


@dataclass(frozen=True)
class PromptWork:
    """What one turn's prompt cost the server (`processed`: the tokens it did not find
    cached), against the tokens the turn added to the conversation (`new`)."""

    agent: str
    index: int
    kind: str
    repeat: int
    prompt_tokens: int
    processed: int
    new: int

    @property
    def again(self) -> int:
        """Tokens processed beyond what the turn added: an earlier turn's prompt processed
        again (a changed line in front of it, a side request that evicted it)."""
        return max(0, self.processed - self.new)


def _items(turn: AgentTurn) -> list[Any]:
    """The turn's conversation items without Claude Code's `cache_control` marks, which
    move to the newest block every turn and are not part of the prompt."""
    items = turn.body.get("input" if turn.path == "/v1/responses" else "messages")
    if isinstance(items, str):
        return [items]
    if not isinstance(items, list):
        return []
    return [_unmarked(item) for item in items]


def _unmarked(item: Any) -> Any:
    """An item and its content blocks without `cache_control` (where Claude Code puts it)."""
    kept = _without_mark(item)
    if isinstance(kept, dict) and isinstance(kept.get("content"), list):
        kept["content"] = [_without_mark(block) for block in kept["content"]]
    return kept


def _without_mark(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    return {key: item for key, item in value.items() if key != "cache_control"}


def base_turns(turns: Sequence[AgentTurn]) -> dict[tuple[str, int], AgentTurn]:
    """Per turn, the latest earlier turn of the same agent that it continues: the same
    tools, and that turn's conversation items the first of its own. What the turn has
    beyond the base's prompt is what it added (the base's answer, a tool's result, the next
    question). The system prompt is not compared: a line in it that changed between turns
    is exactly the re-processing `PromptWork.again` shows."""
    seen: list[tuple[AgentTurn, list[Any], str]] = []
    bases = {}
    for turn in turns:
        items, tools = _items(turn), json.dumps(turn.body.get("tools"), sort_keys=True)
        for earlier, earlier_items, earlier_tools in reversed(seen):
            if (
                earlier.agent == turn.agent
                and earlier_tools == tools
                and earlier_items == items[: len(earlier_items)]
            ):
                bases[turn.agent, turn.index] = earlier
                break
        seen.append((turn, items, tools))
    return bases


def prompt_work(turns: Sequence[AgentTurn], results: Sequence[TurnResult]) -> list[PromptWork]:
    """Per turn and repeat, the prompt work of the first mode that ran it (the others find
    the prompt cached): processed tokens against the turn's new ones, the difference
    between its prompt and its base turn's (`base_turns`; all of it without one)."""
    first: dict[tuple[str, int, int], TurnResult] = {}
    for result in results:
        first.setdefault((result.agent, result.index, result.repeat), result)
    bases = base_turns(turns)
    work = []
    for (agent, index, repeat), result in first.items():
        base = bases.get((agent, index))
        prior = first.get((base.agent, base.index, repeat)) if base else None
        new = result.prompt_tokens - (prior.prompt_tokens if prior else 0)
        processed = result.prompt_tokens - result.cached_tokens
        work.append(
            PromptWork(
                agent, index, result.kind, repeat, result.prompt_tokens, processed, max(0, new)
            )
        )
    return work


def format_prompt_work(work: Sequence[PromptWork]) -> str:
    lines = [
        "prompt per turn (new: what the turn added to the conversation; again: processed "
        "beyond it)",
        f"{'agent':<14} {'turn':>4} {'kind':<6} {'repeat':>6} {'prompt':>7} {'processed':>9} "
        f"{'new':>7} {'again':>7}",
    ]
    for row in work:
        lines.append(
            f"{row.agent[:14]:<14} {row.index:>4} {row.kind:<6} {row.repeat + 1:>6} "
            f"{row.prompt_tokens:>7} {row.processed:>9} {row.new:>7} {row.again:>7}"
        )
    again = sum(row.again for row in work)
    turns = sum(row.again > 0 for row in work)
    lines.append(f"processed again: {again} tokens in {turns} of {len(work)} turns")
    return "\n".join(lines)


def speedups(results: Sequence[TurnResult], mode: str, base: str = "off") -> list[float]:
    """Per turn and repeat, `mode`'s decoding speed over `base`'s on the same turn: the
    spread of these is what a single run's ratio hides. Speeds, not times: an answer from a
    warm cache can differ from a cold one's near a tie, so two modes' answers may differ
    in length by a few tokens."""
    base_speed = {
        (r.agent, r.index, r.repeat): r.generated / r.decode_s
        for r in results
        if r.mode == base and r.decode_s > 0 and r.generated > 1
    }
    ratios = []
    for r in results:
        key = (r.agent, r.index, r.repeat)
        if r.mode == mode and r.decode_s > 0 and r.generated > 1 and key in base_speed:
            ratios.append(r.generated / r.decode_s / base_speed[key])
    return ratios


def format_report(rows: Sequence[Row], results: Sequence[TurnResult], modes: Sequence[str]) -> str:
    lines = [
        f"{'kind':<6} {'mode':<8} {'turns':>5} {'tokens':>7} {'decode s':>9} {'tok/s':>7} "
        f"{'vs off':>7} {'accepted':>13} {'prompt tok':>10} {'prompt s':>9}"
    ]
    plain = {row.kind: row for row in rows if row.mode == "off"}
    for row in rows:
        base = plain.get(row.kind)
        ratio = (
            f"{base.decode_s / row.decode_s * row.generated / base.generated:.2f}x"
            if base and row.decode_s > 0 and base.generated
            else "-"
        )
        accepted = f"{row.accepted}/{row.drafted}" if row.drafted else "-"
        lines.append(
            f"{row.kind:<6} {row.mode:<8} {row.turns:>5} {row.generated:>7} {row.decode_s:>9.2f} "
            f"{row.tokens_per_s:>7.1f} {ratio:>7} {accepted:>13} {row.prompt_processed:>10} "
            f"{row.prefill_s:>9.1f}"
        )
    for mode in modes:
        ratios = speedups(results, mode)
        if mode != "off" and ratios:
            quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
            lines.append(
                f"{mode}/off per turn: median {statistics.median(ratios):.2f}x, quartiles "
                f"{quartiles[0]:.2f}-{quartiles[2]:.2f}x over {len(ratios)} turns"
            )
    return "\n".join(lines)


def document(
    rows: Sequence[Row],
    results: Sequence[TurnResult],
    settings: dict[str, Any],
    work: Sequence[PromptWork] = (),
) -> str:
    return json.dumps(
        {
            "settings": settings,
            "rows": [{**row.__dict__, "tokens_per_s": row.tokens_per_s} for row in rows],
            "results": [result.__dict__ for result in results],
            "prompt_work": [{**row.__dict__, "again": row.again} for row in work],
        },
        indent=1,
    )
