"""llama.cpp's native `/completion` and `/infill`, with the fields llama.vim and llama.vscode send.

Request fields: `prompt` (text or token ids), `input_prefix`, `input_suffix`, `input_extra`
([{filename, text}], at most `MAX_EXTRA_CHUNKS`), `n_predict` (0 only processes the prompt
into the cache, which editors use to warm it), `stop`, `ignore_eos`, the sampling fields,
`stream`, `t_max_predict_ms`, `n_indent`, `response_fields`; fields left out take `localspec
serve`'s defaults (`/props`).
`samplers` (a list of names or a string of llama.cpp's letters, on every endpoint) is the
sampler chain, applied as llama-server applies it: only the listed stages, in order, so without
`temperature` the draw is at temperature 1 and `[]` (llama.vim's warm-ups) is the bare draw;
llama.vim's `["top_k", "top_p", "infill"]` gets llama.cpp's infill stage
(`localspec.speculative.infill_sampler`). A stage localspec lacks is a 400 naming it.
`id_slot`: the slot to use, modulo the slot count as llama-server takes it, while it is free
(a busy slot sends the request to another rather than make it wait: `localspec.server.slots`); -1 is
any.
`n_cmpl` (or `n`, 1 to 16): that many completions of the prompt, one after another on its
cached KV, answered as an array in `index` order as llama-server does (not streamed).

The KV cache: `cache_prompt` (default true) reuses what the cache holds, false processes the
prompt afresh; `n_cache_reuse` is the shortest cached chunk moved into place by shifting
rather than recomputed (absent: `localspec serve --cache-reuse`, 256; 0: the common prefix
only; see `localspec.llama.context` for what a shifted chunk's numbers are);
`t_max_prompt_ms` (> 0) stops prompt processing after that budget (to within one sub-batch)
and answers with nothing generated, `stop_type` "limit" and `localspec.prompt_cut` true with
the tokens left in `localspec.prompt_unprocessed`; the next request goes on from the cache
(llama.vim sends it; llama-server does not implement it).

Answers carry `content`, `stop`, `stop_type`, `truncated` (true when the generation filled
the context, as llama-server says it; localspec never truncates a prompt), `tokens_cached`
and `timings` with `draft_n`/`draft_n_accepted` (`prompt_n` is what was processed, `cache_n`
what was reused, `cache_shifted` how much of that was shifted), plus the `localspec`
statistics. `json_schema` (an object) or `grammar` (GBNF) constrain the output
(`localspec.server.constraints`), on `/infill` too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from localspec.fim import ExtraChunk, InfillPrompt
from localspec.server.admission import release
from localspec.server.constraints import checked, requested_constraint
from localspec.server.jobs import (
    ServerState,
    Wire,
    cancel_on_disconnect,
    check_prompt,
    events,
    finished_stats,
    generation_request,
    read_request,
    respond,
    reuse_fields,
    submit,
    whole_answer,
)
from localspec.server.wire import ApiError, Fields, token_ids
from localspec.server.worker import Cached, Caching
from localspec.speculative.engine import Finished, GenerationRequest
from localspec.speculative.sources import Span

N_CMPL_MAX = 16
"""The most completions one request may ask for (`n_cmpl`): each one is a whole generation."""
MAX_EXTRA_CHUNKS = 1024
"""The most `input_extra` chunks a request may send: llama.vim and llama.vscode keep a ring
of 16 by default, and a prompt holds only the newest that fit the context."""


class EditorStops:
    """llama.cpp's editor-oriented stop rules, applied to the text as each step brings it.

    `n_indent`: after the first line, a line indented less than the cursor's line ends the
    completion and is cut (from its start). `t_max_predict_ms`: once that long has passed
    since generation began, the next piece holding a line break ends the completion, so the
    editor gets whole lines in time; a piece of several tokens (a speculative step) is cut
    after that line break, where llama-server, deciding token by token, stops. As in
    llama-server, the clock is the time since the prompt was processed (a chunk's
    `generated_s`), not since the request came: a request whose prompt took 30 s still gets
    its time to write lines.

    The worker runs the rules (`Job.rule`) as each step's chunk arrives, before the next
    target step: a rule that fires ends the generation at that step, as llama-server's check
    of each token does, not one step later.
    """

    def __init__(self, n_indent: int, t_max_predict_ms: int) -> None:
        self.n_indent = n_indent
        self.limit_s = t_max_predict_ms / 1000.0 if t_max_predict_ms > 0 else None
        self.text = ""
        self.done = False

    def feed(self, piece: str, generated_s: float) -> str:
        """Add generated text, brought by a step that ended `generated_s` after the prompt
        was processed; return the part to send (all of it unless a rule fires)."""
        if self.done:
            return ""
        before = len(self.text)
        self.text += piece
        if self.n_indent > 0:
            cut = self._underindented_line_start()
            if cut is not None:
                self.done = True
                self.text = self.text[:cut]
                return self.text[before:]
        if self.limit_s is not None and "\n" in piece and generated_s > self.limit_s:
            self.done = True
            cut = _after_line_break(piece)  # a speculative step's piece goes on past it
            self.text = self.text[: before + cut]
            return piece[:cut]
        return piece

    def _underindented_line_start(self) -> int | None:
        """Where the first line after the first one that starts (its first non-blank character)
        left of column `n_indent` begins; lines still blank are not judged yet."""
        start = self.text.find("\n") + 1
        while start > 0:
            end = self.text.find("\n", start)
            line = self.text[start:] if end < 0 else self.text[start:end]
            stripped = line.lstrip(" \t")
            if stripped and len(line) - len(stripped) < self.n_indent:
                return start
            start = end + 1
        return None


def _after_line_break(piece: str) -> int:
    """Where llama-server's stop after a line-break token would end `piece`, several tokens
    of a speculative step: after its first line break and the indentation that follows it
    (a token such as "\n    " holds both)."""
    end = piece.index("\n") + 1
    while end < len(piece) and piece[end] in " \t":
        end += 1
    return end


def _prompt_tokens(state: ServerState, fields: Fields) -> list[int]:
    value = fields.body.get("prompt")
    if isinstance(value, str):
        return state.runtime.prompts.tokenize(value, fit=True)
    tokens = token_ids(value)
    if tokens is not None:
        return tokens
    raise ApiError(400, "'prompt' must be a string or a list of token ids", param="prompt")


def _extra(fields: Fields) -> list[ExtraChunk]:
    """`input_extra`'s chunks: at most `MAX_EXTRA_CHUNKS` (2.7 million `{}` in an 8 MiB body
    took 22 s and 550 MB to read, for a prompt that holds a few of them)."""
    given = fields.body.get("input_extra")
    if isinstance(given, list) and len(given) > MAX_EXTRA_CHUNKS:
        raise fields.error(
            "input_extra",
            f"has {len(given)} chunks; this server reads at most {MAX_EXTRA_CHUNKS} (the newest "
            f"that fit the context are used: send the newest {MAX_EXTRA_CHUNKS} or fewer)",
        )
    chunks = []
    for index, raw in enumerate(fields.objects("input_extra")):
        chunk = Fields(raw, prefix=f"input_extra[{index}].")
        chunks.append(ExtraChunk(chunk.string("filename", "tmp"), chunk.string("text")))
    return chunks


async def completion(http: Request, state: ServerState) -> Response:
    fields = await read_request(http, state)
    n_predict = _n_predict(state, fields)
    prompt = await run_in_threadpool(_prompt_tokens, state, fields)
    return await _generate(http, state, fields, prompt, n_predict, route="complete", extra={})


async def infill(http: Request, state: ServerState) -> Response:
    fields = await read_request(http, state)
    if not state.runtime.prompts.supports_fim:
        raise ApiError(
            400,
            f"{state.model_id} has no fill-in-the-middle tokens: serve a FIM code model "
            f"(for example a Qwen2.5-Coder pair)",
        )
    n_predict = _n_predict(state, fields)
    built = await run_in_threadpool(_infill_prompt, state, fields, n_predict)
    extra = {"extra_chunks_used": built.extra_used, "extra_chunks_dropped": built.extra_dropped}
    return await _generate(
        http,
        state,
        fields,
        built.tokens,
        n_predict,
        route="infill",
        extra=extra,
        regions=built.regions,
    )


def _infill_prompt(state: ServerState, fields: Fields, n_predict: int) -> InfillPrompt:
    """The request's FIM prompt, its extra chunks read here too: off the event loop."""
    return state.runtime.prompts.infill_prompt(
        fields.string("input_prefix"),
        fields.string("input_suffix"),
        prompt=fields.string("prompt"),
        extra=_extra(fields),
        max_tokens=n_predict or state.runtime.n_ctx,
        filename=fields.string("filename"),
    )


def _n_predict(state: ServerState, fields: Fields) -> int:
    """Tokens to generate: `n_predict` -1 (llama.cpp's "until the context is full") becomes
    the context size, 0 only caches the prompt; absent, the server's default applies."""
    default = state.defaults.max_tokens or state.runtime.n_ctx
    n_predict = fields.integer("n_predict", default, minimum=-1)
    return state.runtime.n_ctx if n_predict == -1 else n_predict


def _select(body: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """llama.cpp's `response_fields`: only these fields, nested ones by "a/b" path."""
    selected: dict[str, Any] = {}
    for path in paths:
        value: Any = body
        for key in path.split("/"):
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            selected[path] = value
    return selected


_STOP_TYPES = {
    "stop": "eos",
    "length": "limit",
    "context": "limit",
    "cancelled": "limit",
    "prompt_time": "limit",
}


def _prompt_budget(fields: Fields) -> float | None:
    """`t_max_prompt_ms` in seconds; 0 or absent: no budget."""
    milliseconds = fields.integer("t_max_prompt_ms", 0)
    return milliseconds / 1000.0 if milliseconds > 0 else None


def _final(
    event: Finished, state: ServerState, content: str, extra: dict[str, Any], tokens: bool
) -> dict[str, Any]:
    """llama-server's last event; a full context is `stop_type` "limit" with `truncated`
    true, as llama-server reports it (`localspec.stop` says "context"). `tokens`: the
    request's `return_tokens`, the answer's token ids (a stream's pieces carry theirs)."""
    stats = event.stats
    return {
        "content": content,
        "tokens": list(event.tokens) if tokens else [],
        "id_slot": stats.slot,
        "stop": True,
        "model": state.model_id,
        "stop_type": "word" if stats.stop_word else _STOP_TYPES[event.finish_reason],
        "stopping_word": stats.stop_word,
        "tokens_predicted": stats.generated_tokens,
        "tokens_evaluated": stats.prompt_tokens,
        "truncated": event.finish_reason == "context",
        "tokens_cached": stats.prompt_tokens - stats.prompt_unprocessed + stats.generated_tokens,
        **finished_stats(event, **extra),
    }


async def _generate(
    http: Request,
    state: ServerState,
    fields: Fields,
    prompt: list[int],
    n_predict: int,
    *,
    route: str,
    extra: dict[str, Any],
    regions: tuple[Span, ...] = (),
) -> Response:
    """`regions`: the FIM prompt's suffix and extra chunks, for auto's n-gram lookup."""
    response_fields = fields.body.get("response_fields")
    if response_fields is not None and not (
        isinstance(response_fields, list) and all(isinstance(p, str) for p in response_fields)
    ):
        raise ApiError(400, "'response_fields' must be a list of strings", param="response_fields")
    id_slot = _slot(fields)
    completions = _completions(fields, n_predict)
    budget = _prompt_budget(fields)
    if n_predict == 0:
        check_prompt(state, prompt)
        caching = Caching(*reuse_fields(fields), max_prompt_s=budget, route=route)
        return await _cache_only(http, state, prompt, caching, response_fields, id_slot=id_slot)
    constraint = await checked(state, requested_constraint(fields))
    request = generation_request(
        state, fields, prompt, route, n_predict, constraint=constraint, max_prompt_s=budget
    )
    request = replace(request, regions=regions)

    def wire(index: int) -> Wire:
        return replace(_editor_wire(state, fields, extra, response_fields, index), id_slot=id_slot)

    if completions > 1:
        return await _several(http, state, request, completions, wire)
    return await respond(http, state, request, wire(0), stream=fields.boolean("stream"))


def _editor_wire(
    state: ServerState,
    fields: Fields,
    extra: dict[str, Any],
    response_fields: list[str] | None,
    index: int,
) -> Wire:
    """How completion `index` of a request travels, with its own editor stop rules."""
    rules = EditorStops(fields.integer("n_indent", 0), fields.integer("t_max_predict_ms", 0))
    tokens = fields.boolean("return_tokens")

    def answer(event: Finished) -> dict[str, Any]:
        body = {"index": index, **_final(event, state, rules.text, extra, tokens)}
        return _select(body, response_fields) if response_fields else body

    return Wire(
        answer=answer,
        piece=lambda event, text: {"content": text, "stop": False, "tokens": event.tokens},
        # llama-server's last streamed event carries no text: it is all in the pieces before,
        # and clients that join every event's `content` would otherwise get it twice
        ending=lambda event: [{**answer(event), "content": "", "tokens": []}],
        rule=rules,  # the worker cuts each chunk's text and stops where the rules fire
    )


def _slot(fields: Fields) -> int:
    """`id_slot`: llama-server takes any id modulo its slot count (llama.vim's instruction
    requests count theirs up), and so does `localspec.server.slots`; -1 is any."""
    return fields.integer("id_slot", -1, minimum=-1)


def _completions(fields: Fields, n_predict: int) -> int:
    """`n_cmpl` (llama-server's alias: `n`): how many completions of the one prompt."""
    name = "n_cmpl" if fields.present("n_cmpl") or not fields.present("n") else "n"
    count = fields.integer(name, 1, minimum=1, maximum=N_CMPL_MAX)
    if count > 1 and fields.boolean("stream"):
        raise fields.error(name, "above 1 is answered whole, not streamed: send stream false")
    if count > 1 and n_predict == 0:
        raise fields.error(name, "above 1 needs tokens to predict: n_predict 0 only caches")
    return count


async def _several(
    http: Request,
    state: ServerState,
    request: GenerationRequest,
    count: int,
    wire: Callable[[int], Wire],
) -> Response:
    """`n_cmpl` > 1: the completions one after another on the prompt the first leaves in the
    KV cache (llama-server runs them side by side in other slots), answered as llama-server
    does: an array in index order. As there, a given seed is the first completion's and
    each next one takes the next seed."""
    answers = []
    for index in range(count):
        sampling = request.sampling
        if sampling.seed is not None:
            sampling = replace(sampling, seed=(sampling.seed + index) % 2**63)
        nth = replace(request, sampling=sampling)
        answers.append(await whole_answer(http, state, nth, wire(index)))
    return JSONResponse(answers)


async def _cache_only(
    http: Request,
    state: ServerState,
    prompt: list[int],
    caching: Caching,
    response_fields: list[str] | None,
    *,
    id_slot: int = -1,
) -> Response:
    """`n_predict: 0`: process the prompt into the KV cache so the next request reuses it."""
    release(http)  # the queue bounds it from here
    job = submit(state, prompt, None, caching, id_slot=id_slot)
    started = time.perf_counter()
    async with cancel_on_disconnect(http, job):
        async for event in events(job):
            if isinstance(event, Cached):
                prompt_ms = (time.perf_counter() - started) * 1000.0
                body = {
                    "content": "",
                    "stop": True,
                    "stop_type": "limit",
                    "truncated": False,
                    "id_slot": event.slot,
                    "tokens_cached": event.cached,
                    "timings": {
                        "cache_n": event.reused,
                        "cache_shifted": event.shifted,
                        "cache_restored": event.restored,
                        "prompt_n": event.processed,
                        "prompt_ms": prompt_ms,
                        "predicted_n": 0,
                        "predicted_ms": 0.0,
                        "draft_n": 0,
                        "draft_n_accepted": 0,
                    },
                    "localspec": {
                        "cached_tokens": event.reused,
                        "shifted_tokens": event.shifted,
                        "restored_tokens": event.restored,
                        "prompt_cut": event.unprocessed > 0,
                        "prompt_unprocessed": event.unprocessed,
                    },
                }
                return JSONResponse(_select(body, response_fields) if response_fields else body)
    raise ApiError(500, "caching the prompt ended without a result", kind="server_error")
