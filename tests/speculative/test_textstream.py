"""Streamed detokenization and stop strings, on hand-made byte pieces (no model)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from localspec.errors import InvalidSettingsError
from localspec.speculative.textstream import StopMatcher, TextAssembler, TokenTextStream


def run_matcher(stops: Sequence[str], chunks: Sequence[str]) -> tuple[str, StopMatcher]:
    """Push chunks until stopped, then flush, as a generation loop would."""
    matcher = StopMatcher(stops)
    out: list[str] = []
    for chunk in chunks:
        emitted, stopped = matcher.push(chunk)
        out.append(emitted)
        if stopped:
            break
    out.append(matcher.flush())
    return "".join(out), matcher


def run_stream(stops: Sequence[str], pieces: Sequence[bytes]) -> tuple[str, TokenTextStream]:
    stream = TokenTextStream(stops)
    out: list[str] = []
    for piece in pieces:
        emitted, stopped = stream.push(piece)
        out.append(emitted)
        if stopped:
            break
    out.append(stream.flush())
    return "".join(out), stream


def single_bytes(text: str) -> list[bytes]:
    return [bytes([b]) for b in text.encode()]


# --- TextAssembler -------------------------------------------------------------------------------


def test_two_byte_character_split_across_pieces() -> None:
    assembler = TextAssembler()
    first, second = "é".encode()[:1], "é".encode()[1:]
    assert assembler.feed(b"caf" + first) == "caf"
    assert assembler.feed(second) == "é"
    assert assembler.flush() == ""


def test_emoji_split_into_four_single_byte_pieces() -> None:
    assembler = TextAssembler()
    pieces = single_bytes("🙂")
    assert len(pieces) == 4
    assert [assembler.feed(p) for p in pieces] == ["", "", "", "🙂"]
    assert assembler.flush() == ""


def test_invalid_bytes_are_replaced() -> None:
    assembler = TextAssembler()
    assert assembler.feed(b"a\xffb") == "a\ufffdb"
    assert assembler.feed(b"\xc3") == ""
    assert assembler.flush() == "\ufffd"


def test_invalid_continuation_is_replaced_and_decoding_goes_on() -> None:
    assembler = TextAssembler()
    assert assembler.feed(b"\xc3") == ""
    assert assembler.feed(b"x") == "\ufffdx"


# --- StopMatcher ---------------------------------------------------------------------------------


def test_no_stops_is_pass_through() -> None:
    matcher = StopMatcher([])
    assert matcher.push("hello") == ("hello", False)
    assert matcher.push(" world") == (" world", False)
    assert matcher.flush() == ""
    assert matcher.matched is None


def test_empty_stop_string_is_rejected() -> None:
    with pytest.raises(InvalidSettingsError, match="empty"):
        StopMatcher(["ok", ""])
    with pytest.raises(InvalidSettingsError, match="empty"):
        TokenTextStream([""])


def test_stop_inside_one_chunk() -> None:
    matcher = StopMatcher(["END"])
    assert matcher.push("abc END def") == ("abc ", True)
    assert matcher.matched == "END"
    assert matcher.stopped
    assert matcher.push("more") == ("", True)
    assert matcher.flush() == ""


def test_stop_spanning_two_chunks() -> None:
    matcher = StopMatcher(["</s>"])
    assert matcher.push("hi </") == ("hi ", False)
    assert matcher.push("s> tail") == ("", True)
    assert matcher.matched == "</s>"


def test_stop_spanning_three_chunks() -> None:
    matcher = StopMatcher(["\n\n###"])
    assert matcher.push("x\n") == ("x", False)
    assert matcher.push("\n#") == ("", False)
    assert matcher.push("## y") == ("", True)
    assert matcher.matched == "\n\n###"


def test_stop_at_the_very_start() -> None:
    matcher = StopMatcher(["<|end|>"])
    assert matcher.push("<|end|>rest") == ("", True)
    assert matcher.matched == "<|end|>"
    assert run_matcher(["ab"], ["a", "b", "c"])[0] == ""


def test_partial_match_that_fails_is_released() -> None:
    matcher = StopMatcher(["STOP"])
    assert matcher.push("go ST") == ("go ", False)
    assert matcher.push("O") == ("", False)
    assert matcher.push("Px") == ("", True)
    matcher = StopMatcher(["STOP"])
    assert matcher.push("go ST") == ("go ", False)
    assert matcher.push("OW") == ("STOW", False)
    assert matcher.flush() == ""
    assert matcher.matched is None


def test_flush_releases_held_text() -> None:
    matcher = StopMatcher(["STOP"])
    assert matcher.push("the end ST") == ("the end ", False)
    assert matcher.flush() == "ST"
    assert matcher.matched is None
    assert not matcher.stopped


def test_shorter_and_longer_stop_at_same_start() -> None:
    # Same start emits the same text, so the stream ends as soon as "ab" completes.
    matcher = StopMatcher(["abc", "ab"])
    assert matcher.push("xa") == ("x", False)
    assert matcher.push("b") == ("", True)
    assert matcher.matched == "ab"
    # Both complete in one chunk: the longer one is reported.
    matcher = StopMatcher(["ab", "abc"])
    assert matcher.push("xabcd") == ("x", True)
    assert matcher.matched == "abc"


def test_overlapping_candidate_shifts_by_one() -> None:
    # "aab": the candidate starting at the first "a" fails, the one at the second completes.
    matcher = StopMatcher(["ab"])
    assert matcher.push("a") == ("", False)
    assert matcher.push("a") == ("a", False)
    assert matcher.push("b") == ("", True)
    assert matcher.matched == "ab"
    assert run_matcher(["ab"], ["aab"])[0] == "a"


def test_holds_longest_suffix_that_may_become_a_stop() -> None:
    matcher = StopMatcher(["aab"])
    assert matcher.push("xaaa") == ("xa", False)
    assert matcher.push("a") == ("a", False)
    assert matcher.push("b!") == ("", True)


def test_earlier_start_wins_over_stop_that_completes_first() -> None:
    # "bc" completes while "abcd", which starts earlier, is still possible: wait and see.
    matcher = StopMatcher(["abcd", "bc"])
    assert matcher.push("a") == ("", False)
    assert matcher.push("b") == ("", False)
    assert matcher.push("c") == ("", False)
    assert not matcher.stopped
    assert matcher.push("d") == ("", True)
    assert matcher.matched == "abcd"
    # The earlier candidate fails: the pending "bc" ends the text after "a".
    matcher = StopMatcher(["abcd", "bc"])
    assert matcher.push("abc") == ("", False)
    assert matcher.push("e") == ("a", True)
    assert matcher.matched == "bc"
    # Generation ends while still waiting: the flush settles on "bc".
    matcher = StopMatcher(["abcd", "bc"])
    assert matcher.push("xabc") == ("x", False)
    assert matcher.flush() == "a"
    assert matcher.matched == "bc"


def test_held_text_is_bounded_by_the_longest_stop() -> None:
    matcher = StopMatcher(["aaaa"])
    emitted = [matcher.push("a" * 3 + "b")[0] for _ in range(1000)]
    assert "".join(emitted) == "aaab" * 1000
    assert matcher.push("aaa") == ("", False)
    assert len(matcher.flush()) == 3


# --- TokenTextStream -----------------------------------------------------------------------------


def test_stream_stop_spanning_split_multibyte_pieces() -> None:
    stops = ["é!"]
    out, stream = run_stream(stops, [b"caf", *single_bytes("é"), b"! and more"])
    assert out == "caf"
    assert stream.text == "caf"
    assert stream.matched == "é!"
    assert stream.push(b"ignored") == ("", True)
    assert stream.flush() == ""


def test_stream_emoji_pieces_and_flush() -> None:
    pieces = [b"ok ", *single_bytes("🙂"), b" S"]
    stream = TokenTextStream(["STOP"])
    outs = [stream.push(p) for p in pieces]
    assert outs == [
        ("ok ", False),
        ("", False),
        ("", False),
        ("", False),
        ("🙂", False),
        (" ", False),
    ]
    assert stream.flush() == "S"
    assert stream.text == "ok 🙂 S"
    assert stream.matched is None
    assert not stream.stopped


def test_stream_dangling_byte_at_end_becomes_replacement_character() -> None:
    out, stream = run_stream([], [b"abc", "é".encode()[:1]])
    assert out == "abc\ufffd"
    assert stream.text == out


def test_stream_stop_completed_by_flushed_replacement_character() -> None:
    out, stream = run_stream(["x\ufffd"], [b"ax", b"\xe2\x82"])
    assert out == "a"
    assert stream.matched == "x\ufffd"


def test_stream_without_stops_passes_everything_through() -> None:
    text = "héllo 🙂 wörld"
    out, stream = run_stream([], single_bytes(text))
    assert out == text
    assert stream.text == text


# --- property test -------------------------------------------------------------------------------


def reference(text: str, stops: Sequence[str]) -> tuple[str, int | None]:
    """The rule on the whole text: cut at the earliest start of any stop string."""
    starts = [i for i in (text.find(stop) for stop in stops) if i >= 0]
    if not starts:
        return text, None
    return text[: min(starts)], min(starts)


def random_split(rng: random.Random, data: bytes) -> list[bytes]:
    pieces: list[bytes] = []
    i = 0
    while i < len(data):
        n = rng.randint(1, 5)
        pieces.append(data[i : i + n])
        i += n
    return pieces


def test_random_splits_match_whole_text_reference() -> None:
    rng = random.Random(20240601)
    alphabet = "aab é🙂\n"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        stops = [
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4)))
            for _ in range(rng.randint(0, 3))
        ]
        expected, start = reference(text, stops)

        out, stream = run_stream(stops, random_split(rng, text.encode()))
        assert out == expected, (text, stops)
        assert stream.text == expected
        if start is None:
            assert stream.matched is None
        else:
            assert stream.matched is not None
            assert text.startswith(stream.matched, start)

        chunks = [text[i : i + 3] for i in range(0, len(text), 3)]
        assert run_matcher(stops, chunks)[0] == expected

        whole_out, whole = run_matcher(stops, [text])
        assert whole_out == expected
        if start is not None:
            longest = max((s for s in stops if text.startswith(s, start)), key=len)
            assert whole.matched == longest


def test_a_long_stop_string_costs_memory_linear_in_its_length() -> None:
    """Every prefix of a 5,000-character stop string is 12.5 M characters (1 MB of stop
    string was 24 GB): the matcher keeps one table entry per character instead."""
    import tracemalloc  # noqa: PLC0415 - this test's own instrument

    stop = "ab" * 2500
    tracemalloc.start()
    try:
        matcher = StopMatcher([stop])
        out, stopped = matcher.push("ab" * 2499 + "a")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (out, stopped) == ("", False)  # all of it may still become the stop string
    assert matcher.push("b") == ("", True) and matcher.matched == stop
    assert peak < 2_000_000


def test_partial_matches_follow_overlapping_stop_strings() -> None:
    """A stop string whose start repeats inside it ("aab" in "aaab"): the held text is the
    longest tail that may still grow into it, as with every prefix kept."""
    matcher = StopMatcher(["aab", "abc"])
    assert matcher.push("xaa") == ("x", False)
    assert matcher.push("a") == ("a", False)
    assert matcher.push("b") == ("", True) and matcher.matched == "aab"
