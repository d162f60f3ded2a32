"""llama.vim's rules (ring buffer, local context, cache, speculative requests) and the seeded
session built on them: pure, no model."""

from __future__ import annotations

import itertools
import random
from collections import Counter

from localspec.bench.editor_session import SourceFile, editor_session, shipped_files
from localspec.bench.llama_vim import (
    FIM,
    KINDS,
    SPECULATIVE,
    WARMUP,
    Buffer,
    Chunk,
    Ring,
    Vim,
    VimConfig,
    chunk_sim,
    local_context,
)

# the keys llama.vim's llama#fim and s:ring_update send
FIM_KEYS = {
    "id_slot", "input_prefix", "input_suffix", "input_extra", "prompt", "n_predict", "stop",
    "n_indent", "top_k", "top_p", "samplers", "stream", "cache_prompt", "t_max_prompt_ms",
    "t_max_predict_ms", "response_fields",
}  # fmt: skip
WARMUP_KEYS = {
    "id_slot", "input_prefix", "input_suffix", "input_extra", "prompt", "n_predict",
    "temperature", "samplers", "stream", "cache_prompt", "t_max_prompt_ms", "t_max_predict_ms",
    "response_fields",
}  # fmt: skip


def _lines(n: int, word: str = "value") -> list[str]:
    return [f"    {word}_{i} = compute({i})" for i in range(n)]


def test_chunk_similarity_is_llama_vims_word_overlap() -> None:
    assert chunk_sim(["a b c"], ["a b c"]) == 1.0
    assert chunk_sim(["a b"], ["c d"]) == 0.0
    assert chunk_sim([""], [""]) == 1.0
    assert chunk_sim(["x = f(y)"], ["x = g(y)"]) == 2 * 2 / 6  # x, y shared of 3 + 3 words


def test_pick_dedups_evicts_similar_chunks_and_bounds_the_queue() -> None:
    ring = Ring(VimConfig(ring_chunk_size=64), random.Random(0))
    ring.pick(["a = 1", "b = 2", "c = 3"], "f.py", do_evict=True)
    ring.pick(["a = 1", "b = 2", "c = 3"], "f.py", do_evict=True)  # the same: not queued again
    assert len(ring.queued) == 1
    ring.pick(["a = 1", "b = 2", "c = 3", "a"], "g.py", do_evict=False)  # similar: deferred
    assert [c.filename for c in ring.queued] == ["f.py"]
    ring.pick(["a = 1", "b = 2", "c = 3", "a"], "g.py", do_evict=True)  # similar: replaces
    assert [c.filename for c in ring.queued] == ["g.py"] and ring.n_evict == 1
    ring.pick(["x", "y"], "h.py", do_evict=True)  # under 3 lines: never picked
    for i in range(20):
        ring.pick([f"distinct_{i}_{j}" for j in range(3)], "q.py", do_evict=True)
    assert len(ring.queued) == 16  # llama.vim drops the oldest queued chunk beyond 16


def test_a_long_text_gives_a_random_span_of_half_a_chunk_plus_one_line() -> None:
    ring = Ring(VimConfig(ring_chunk_size=8), random.Random(1))
    text = _lines(40)
    ring.pick(text, "f.py", do_evict=True)
    (chunk,) = ring.queued
    assert len(chunk.data) == 5  # Vim's inclusive slice of 8 // 2 lines
    start = text.index(chunk.data[0])
    assert list(chunk.data) == text[start : start + 5]


def test_update_moves_one_queued_chunk_and_drops_the_oldest_of_a_full_ring() -> None:
    ring = Ring(VimConfig(ring_n_chunks=2), random.Random(0))
    assert not ring.update()
    ring.queued = [Chunk((f"line {i}",), f"{i}.py") for i in range(3)]
    assert ring.update() and ring.update() and ring.update()
    assert [c.filename for c in ring.chunks] == ["1.py", "2.py"] and not ring.queued
    assert ring.extra() == [
        {"text": "line 1\n", "filename": "1.py"},
        {"text": "line 2\n", "filename": "2.py"},
    ]


def test_local_context_windows_and_the_as_accepted_text() -> None:
    config = VimConfig(n_prefix=3, n_suffix=2)
    buf = Buffer.open("f.py", "\n".join(["l1", "l2", "l3", "l4", "    l5 = 1", "l6", "l7", "l8"]))
    local = local_context(buf, 6, 5, prev=(), config=config, indent_last=-1)
    assert local.prefix == "l2\nl3\nl4\n"  # n_prefix lines before the cursor's line
    assert local.middle == "    l5"  # the line up to the cursor is the prompt
    assert local.suffix == " = 1\nl6\nl7\n"
    assert local.indent == 4 and local.line_cur_suffix == " = 1"
    accepted = local_context(buf, 6, 5, prev=[" = 2"], config=config, indent_last=4)
    assert accepted.middle == "    l5 = 1 = 2" and accepted.suffix == "\nl6\nl7\n"


def test_typing_into_a_suggestion_sends_one_request_per_keystroke_and_one_speculative() -> None:
    buf = Buffer.open("f.py", "\n".join(_lines(10)))
    vim = Vim(VimConfig(), random.Random(0))
    original = buf.lines[4]
    buf.lines[4] = original[:9]
    buf.cursor = (5, 9)
    first = list(vim.cursor_moved_insert(buf, "type"))
    assert [r.kind for r in first] == [FIM, SPECULATIVE]
    assert first[0].body["t_max_predict_ms"] == 250 and first[1].body["t_max_predict_ms"] == 1000
    assert first[1].body["prompt"] == original  # the line as if the suggestion were accepted
    buf.lines[4] = original[:10]
    buf.cursor = (5, 10)
    second = list(vim.cursor_moved_insert(buf, "type"))
    assert [r.kind for r in second] == [FIM]  # the as-accepted completion is cached
    assert vim.hint is not None and vim.hint.content == [original[10:]]
    assert vim.accept(buf) and buf.lines[4] == original and buf.cursor == (5, len(original))
    assert list(vim.cursor_moved_insert(buf, "accept")) == []  # shown from the cache


def test_the_session_is_seeded_and_counts_its_completions() -> None:
    first = editor_session(seed=3, fim_requests=20)
    assert first == editor_session(seed=3, fim_requests=20)
    assert first != editor_session(seed=4, fim_requests=20)
    kinds = Counter(r.kind for r in first)
    assert kinds[FIM] + kinds[SPECULATIVE] == 20
    assert kinds[SPECULATIVE] > 0 and kinds[WARMUP] > 0 and set(kinds) <= set(KINDS)


def test_the_default_session_sends_llama_vims_bodies() -> None:
    config = VimConfig()
    requests = editor_session()
    assert sum(r.kind != WARMUP for r in requests) == 35
    difflib = shipped_files()[0].text.split("\n")
    extras = []
    for request in requests:
        body = request.body
        assert set(body) == (WARMUP_KEYS if request.kind == WARMUP else FIM_KEYS)
        assert body["id_slot"] == 0 and body["cache_prompt"] is True
        assert len(body["input_extra"]) <= config.ring_n_chunks
        if request.kind == WARMUP:
            assert body["n_predict"] == 0 and body["t_max_prompt_ms"] == 1
            extras.append(body["input_extra"])
            continue
        assert body["n_predict"] == 128 and body["t_max_prompt_ms"] == 500
        assert body["input_prefix"].count("\n") <= config.n_prefix
        assert body["input_suffix"].count("\n") <= config.n_suffix + 1
        assert body["samplers"] == ["top_k", "top_p", "infill"]
        line = body["prompt"]
        assert any(original.startswith(line) for original in difflib), line
    # each warm-up follows a chunk entering the ring: its extra differs from the one before
    assert all(a != b for a, b in itertools.pairwise(extras))
    assert {c["filename"] for e in extras for c in e} == {"difflib.py", "heapq.py"}


def test_a_small_file_alone_makes_a_small_session() -> None:
    source = SourceFile("small.py", "\n".join(_lines(12)))
    requests = editor_session([source], fim_requests=6, seed=0)
    assert sum(r.kind != WARMUP for r in requests) == 6
    assert all(c["filename"] == "small.py" for r in requests for c in r.body["input_extra"])
