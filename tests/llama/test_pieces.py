"""Prompts go to llama.cpp in pieces, the points where a server may stop them for an editor."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from localspec.cli.arguments import DEFAULT_PROMPT_HOLD_S, MAX_UBATCH, MIN_UBATCH
from localspec.errors import UsageError
from localspec.llama.backend import WhichLogits
from localspec.llama.context import LlamaContext, Logits
from localspec.llama.devices import gpu_devices, shared_piece
from localspec.llama.model import LlamaModel
from localspec.llama.pieces import (
    CPU_PIECE,
    MAX_PIECE,
    MIDWAY_STOPS,
    MIN_CALL,
    MIN_PIECE,
    PROMPT_HOLD_S,
    SHARED_PIECE_S,
    PromptHold,
    abortable,
    next_piece,
)
from localspec.loading import RuntimeSettings
from tests.llama.helpers import random_tokens
from tests.tiny_mtp_model import write_tiny_mtp_model


@pytest.mark.parametrize(
    ("left", "expected"),
    [
        (1, 1),  # all that is left
        (128, 128),
        (129, 129),  # a 1-token tail joins the piece before it
        (191, 191),  # 63 left over: under half a piece
        (192, 128),  # 64 left over: a piece of its own
        (900, 128),
    ],
)
def test_a_short_tail_joins_the_piece_before_it(left: int, expected: int) -> None:
    assert next_piece(left, 128, 512) == expected


def test_with_pieces_as_large_as_the_batch_no_call_is_shorter_than_min_call() -> None:
    """A tail cannot join a full batch: the batch before it leaves `MIN_CALL` tokens, so that
    no call takes the kernels of short calls where the prompt has more tokens than that."""
    assert next_piece(530, 512, 512) == 7 * MIN_CALL  # leaves 82, and ends at a multiple
    assert next_piece(MIN_CALL, 512, 512) == MIN_CALL
    assert next_piece(576, 512, 512) == 512  # 64 left: a call of its own
    assert next_piece(18, 512, 512) == 18  # the prompt's only call


@pytest.mark.parametrize(("piece", "n_batch"), [(16, 512), (64, 256), (128, 512), (512, 512)])
def test_every_call_fits_a_batch_and_none_is_short_where_pieces_are_long(
    piece: int, n_batch: int
) -> None:
    for total in range(1, 2100):
        calls: list[int] = []
        left = total
        while left:
            size = next_piece(left, piece, n_batch)
            assert 1 <= size <= min(left, n_batch), (total, calls, size)
            calls.append(size)
            left -= size
        if piece >= 2 * MIN_CALL and len(calls) > 1:
            assert min(calls) >= MIN_CALL, (total, calls)
            assert all(size % MIN_CALL == 0 for size in calls[:-1]), (total, calls)


def _widths(context: LlamaContext) -> list[int]:
    """Wrap `context.decode` to note the size of every call."""
    widths: list[int] = []
    decode = context.decode

    def noted(tokens: Sequence[int], *, logits: WhichLogits) -> Logits:
        widths.append(len(tokens))
        return decode(tokens, logits=logits)

    context.decode = noted  # type: ignore[method-assign]
    return widths


def test_a_prompt_is_decoded_in_pieces_and_stops_between_them(model: LlamaModel) -> None:
    """An interruption comes after one piece, not one batch; the prefill that goes on from
    there decodes the same calls as one never stopped, so its logits are the same bytes."""
    prompt = random_tokens(3, 280)
    with LlamaContext(model, 512, n_batch=256, n_threads=1, piece=64) as whole:
        widths = _widths(whole)
        _, expected = whole.prefill_logits(prompt)
        assert widths == [64, 64, 64, 88]  # 24 left after four pieces: under half a piece
    with LlamaContext(model, 512, n_batch=256, n_threads=1, piece=64) as stopped:
        widths = _widths(stopped)
        ended: list[int] = []  # where each call ended (a decode hook runs after it)
        stopped.decode_hooks.append(lambda base, chunk: ended.append(base + len(chunk)))

        def after_the_first_call() -> bool:
            """Asked during calls too: no until the first ended, then yes once."""
            if ended != [64]:
                return False
            ended.append(-1)  # the stop, between the first call and the second
            return True

        prefilled, row = stopped.prefill_logits(prompt, interrupt=after_the_first_call)
        assert (prefilled.reused, row, stopped.n_past) == (0, None, 64)
        prefilled, row = stopped.prefill_logits(prompt, interrupt=after_the_first_call)
        assert prefilled.reused == 64
        assert widths == [64, 64, 64, 88]
        assert ended == [64, -1, 128, 192, 280]
    assert row is not None and expected is not None
    np.testing.assert_array_equal(row, expected)


def test_a_stopped_prompt_takes_shared_pieces_for_a_while(model: LlamaModel) -> None:
    """Calls are whole batches until a prompt is stopped; then shared pieces, for
    `SHARED_PIECE_S`; the answer is the one of a prompt never stopped, bit for bit."""
    prompt = random_tokens(3, 600)
    with LlamaContext(model, 1024, n_batch=256, n_threads=1, shared_piece=64) as whole:
        widths = _widths(whole)
        _, expected = whole.prefill_logits(prompt)
        assert widths == [256, 256, 88]
    with LlamaContext(model, 1024, n_batch=256, n_threads=1, shared_piece=64) as stopped:
        now = [100.0]
        stopped.reuse.clock = lambda: now[0]
        widths = _widths(stopped)
        ended: list[int] = []
        stopped.decode_hooks.append(lambda base, chunk: ended.append(base + len(chunk)))

        def after_the_first_call() -> bool:
            if ended != [256]:
                return False
            ended.append(-1)
            return True

        _, row = stopped.prefill_logits(prompt, interrupt=after_the_first_call)
        assert (row, stopped.n_past) == (None, 256)
        _, row = stopped.prefill_logits(prompt)
        assert widths == [256, 64, 64, 64, 64, 88]  # 24 left after four: under MIN_CALL
        assert row is not None and expected is not None
        np.testing.assert_array_equal(row, expected)
        now[0] += SHARED_PIECE_S  # quiet for that long: whole batches again
        stopped.truncate(0)
        del widths[:]
        stopped.prefill(prompt)
        assert widths == [256, 256, 88]


def test_no_piece_means_the_whole_batch(model: LlamaModel) -> None:
    with LlamaContext(model, 512, n_batch=128, n_threads=1) as context:
        assert context.piece == 128
        widths = _widths(context)
        context.prefill(random_tokens(4, 300))
        assert widths == [128, 64, 108]  # 44 would be left: the call before leaves it more


def test_a_piece_larger_than_the_batch_is_the_batch(model: LlamaModel) -> None:
    with LlamaContext(model, 512, n_batch=64, n_threads=1, piece=256) as context:
        assert context.piece == 64


def test_while_editors_ask_the_cpu_takes_pieces_and_a_gpu_the_whole_batch(
    model: LlamaModel,
) -> None:
    """`--ubatch-size` wins; left out, a target with no layer on a GPU gets `CPU_PIECE`."""
    assert shared_piece(256, model, 0) == 256
    assert shared_piece(None, model, 0) == CPU_PIECE
    assert shared_piece(None, model, -1) == (None if gpu_devices() else CPU_PIECE)


def test_the_command_line_knows_the_range_the_settings_check() -> None:
    """`localspec.cli.arguments` spells the range and the hold without importing llama.cpp."""
    assert (MIN_UBATCH, MAX_UBATCH) == (MIN_PIECE, MAX_PIECE)
    assert DEFAULT_PROMPT_HOLD_S == PROMPT_HOLD_S
    with pytest.raises(UsageError, match="--ubatch-size must be between 16 and 512"):
        RuntimeSettings(Path("t.gguf"), ubatch=8)


def test_a_call_under_way_stops_when_asked_and_comes_again_whole(
    model: LlamaModel, caplog: pytest.LogCaptureFixture
) -> None:
    """llama.cpp asks between the operations of a call: the tenth question, within the first
    piece, stops it; the cache keeps none of it, llama.cpp's error line for the stop is no
    error, and going on decodes the same calls as a prefill never stopped."""
    prompt = random_tokens(3, 280)
    with LlamaContext(model, 512, n_batch=256, n_threads=1, piece=64) as whole:
        _, expected = whole.prefill_logits(prompt)
    with LlamaContext(model, 512, n_batch=256, n_threads=1, piece=64) as stopped:
        widths = _widths(stopped)
        asked = 0

        def tenth() -> bool:
            nonlocal asked
            asked += 1
            return asked == 10

        with caplog.at_level(logging.DEBUG, logger="localspec.llama.cpp"):
            prefilled, row = stopped.prefill_logits(prompt, interrupt=tenth)
        assert (prefilled.reused, row, stopped.n_past, asked) == (0, None, 0, 10)
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert "failed to decode, ret = 2" in caplog.text
        asked = 100  # the callback is off: a decode now is not asked, and nothing stops it
        stopped.decode(prompt[:3], logits="none")
        assert asked == 100
        stopped.truncate(0)
        _, row = stopped.prefill_logits(prompt)
        assert widths == [64, 3, 64, 64, 64, 88]  # the stopped piece, the decode, then whole
    assert row is not None and expected is not None
    np.testing.assert_array_equal(row, expected)


def test_an_interrupt_check_that_fails_lets_the_prompt_go_on(
    model: LlamaModel, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> bool:
        raise RuntimeError("boom")

    with LlamaContext(model, 512, n_batch=256, n_threads=1, piece=64) as context:
        with (
            caplog.at_level(logging.ERROR, logger="localspec.llama.pieces"),
            abortable(context.handle, broken),
        ):
            context.decode(random_tokens(4, 20), logits="none")
        assert context.n_past == 20
    assert "the prompt's interrupt check failed" in caplog.text


class Clock:
    """A clock that moves only when told (no test may depend on the machine's speed)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_hold_stops_a_prompt_until_it_has_stood_still_too_long() -> None:
    clock, position, urgent = Clock(), [0], [True]
    hold = PromptHold(lambda: urgent[0], lambda: position[0], hold_s=5.0, clock=clock)
    assert hold()  # the prompt starts: stopping wastes nothing
    clock.now = 4.9
    assert hold()  # within a call, 4.9 s without progress: still stopped
    clock.now = 5.0
    assert not hold()  # held 5 s: the call under way runs to its end
    position[0] = 64
    clock.now = 5.5
    assert hold()  # a call ended: a stop there wastes nothing, and the hold starts again
    clock.now = 10.4
    assert hold()
    urgent[0] = False
    assert not hold()  # nothing waits: never stopped


def test_a_hold_of_zero_stops_a_prompt_only_where_a_call_ended() -> None:
    clock, position, urgent = Clock(), [0], [True]
    hold = PromptHold(lambda: urgent[0], lambda: position[0], hold_s=0.0, clock=clock)
    assert not hold()  # the first question: within the first call
    assert not hold()
    position[0] = 128
    assert hold()  # the question right after the call ended
    urgent[0] = False
    position[0] = 192
    assert not hold()  # progress seen while nothing waited
    urgent[0] = True
    assert not hold()  # an editor now, within the call that began at 192: it runs on


@pytest.mark.parametrize("hold_s", [0.0, 5.0])
def test_an_editor_arriving_within_a_call_stops_it_only_under_a_hold(
    model: LlamaModel, caplog: pytest.LogCaptureFixture, hold_s: float
) -> None:
    """The prompt moves on unasked for two calls; an editor's request then arrives within the
    third. Held, the call stops there (llama.cpp says so at debug); with a hold of 0 it runs
    to its end and the prompt stops right after it."""
    prompt = random_tokens(3, 280)
    with LlamaContext(model, 512, n_batch=256, n_threads=1, piece=64) as context:
        seen = {"third call's questions": 0}

        def urgent() -> bool:
            if context.n_past == 128:
                seen["third call's questions"] += 1
            return context.n_past > 128 or seen["third call's questions"] >= 3

        hold = PromptHold(urgent, lambda: context.n_past, hold_s=hold_s, clock=Clock())
        with caplog.at_level(logging.DEBUG, logger="localspec.llama.cpp"):
            _, row = context.prefill_logits(prompt, interrupt=hold)
    assert row is None
    assert context.n_past == (128 if hold_s else 192)
    assert ("failed to decode, ret = 2" in caplog.text) == (hold_s > 0)


def test_however_often_editors_ask_the_prompt_moves_on(model: LlamaModel) -> None:
    """A stop asked at every question: the prompt stands still while the clock says it has
    been held less than the hold, and then finishes the call under way."""
    prompt = random_tokens(3, 280)
    clock = Clock()
    with LlamaContext(model, 512, n_batch=256, n_threads=1, piece=64) as context:
        hold = PromptHold(lambda: True, lambda: context.n_past, hold_s=5.0, clock=clock)
        stops = []
        for step in range(5):
            clock.now = 2.0 * step  # each editor's request takes 2 s
            _, row = context.prefill_logits(prompt, interrupt=hold)
            assert row is None
            stops.append(context.n_past)
        # held from 0 s: stopped at 0, 2 and 4 s; at 6 s the call runs and the prompt stops
        # right after it; the hold starts again then
        assert stops == [0, 0, 0, 64, 64]


def test_a_call_stopped_midway_too_often_runs_to_its_end_whatever_the_interrupt(
    model: LlamaModel,
) -> None:
    """The backstop under any interrupt: one that always asks still lets the prompt move on,
    a call after `MIDWAY_STOPS` stops within it."""
    prompt = random_tokens(3, 280)
    with LlamaContext(model, 512, n_batch=256, n_threads=1, piece=64) as context:
        stops = []
        for _ in range(MIDWAY_STOPS + 2):
            _, row = context.prefill_logits(prompt, interrupt=lambda: True)
            assert row is None
            stops.append(context.n_past)
    assert stops == [0] * MIDWAY_STOPS + [64, 64]


def test_a_recurrent_model_s_prompt_stops_between_calls_only(tmp_path: Path) -> None:
    """llama.cpp advances a recurrent state before a call's graph runs, so a call stopped
    midway could not be dropped (the cache would be out of step and cleared): a hybrid
    model's prompt is never stopped within a call, only after one."""
    model = LlamaModel(write_tiny_mtp_model(tmp_path / "hybrid.gguf"))
    try:
        assert model.recurrent
        prompt = random_tokens(3, 280)
        with LlamaContext(model, 512, n_batch=256, n_threads=1, piece=64) as context:
            _, row = context.prefill_logits(prompt, interrupt=lambda: True)
            assert row is None and context.n_past == 64  # the first call ran whole
            _, row = context.prefill_logits(prompt)
            assert row is not None and context.n_past == len(prompt)
    finally:
        model.close()
