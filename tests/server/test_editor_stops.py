"""llama.cpp's editor stop rules (`n_indent`, `t_max_predict_ms`) on streamed text."""

from __future__ import annotations

from localspec.server.llamacpp_api import EditorStops


def feed_all(rules: EditorStops, pieces: list[str], generated_s: float = 0.0) -> str:
    return "".join(rules.feed(piece, generated_s) for piece in pieces)


def test_a_line_indented_less_than_the_cursor_ends_the_completion() -> None:
    rules = EditorStops(n_indent=4, t_max_predict_ms=0)
    sent = feed_all(rules, ["x = 1\n", "    y = 2\n", "  ", "  z = 3\n", "w", "ignored"])
    assert rules.done
    assert rules.text == "x = 1\n    y = 2\n    z = 3\n"
    assert sent == rules.text
    assert rules.feed("more", 0.0) == ""


def test_the_first_line_and_blank_lines_are_not_judged() -> None:
    rules = EditorStops(n_indent=8, t_max_predict_ms=0)
    feed_all(rules, ["a", "\n", "\n", "        b\n"])
    assert not rules.done


def test_past_the_time_limit_it_stops_once_a_line_is_complete() -> None:
    rules = EditorStops(n_indent=0, t_max_predict_ms=100)
    assert rules.feed("abc", generated_s=0.5) == "abc"
    assert not rules.done  # no line break yet
    assert rules.feed("d\ne", generated_s=0.6) == "d\n"
    assert rules.done and rules.text == "abcd\n"


def test_a_step_of_several_tokens_is_cut_after_its_line_break() -> None:
    """A speculative step verifies tokens past the line break at once: what llama-server,
    stopping after the line-break token, would not send is left out, and so is the rest."""
    rules = EditorStops(n_indent=0, t_max_predict_ms=100)
    assert rules.feed("x = 1", generated_s=0.05) == "x = 1"
    assert rules.feed(")\n    y = 2\n", generated_s=0.2) == ")\n    "
    assert rules.done and rules.text == "x = 1)\n    "


def test_only_a_line_break_that_comes_past_the_limit_stops_it() -> None:
    """llama-server checks the time on each piece holding a line break: one written before
    the limit does not end the completion later, at a piece without one."""
    rules = EditorStops(n_indent=0, t_max_predict_ms=100)
    assert feed_all(rules, ["a\n"], generated_s=0.05) == "a\n"
    assert rules.feed("b", generated_s=0.2) == "b" and not rules.done
    assert rules.feed("c\n", generated_s=0.3) == "c\n" and rules.done


def test_the_clock_is_the_steps_time_since_the_prompt_not_the_requests() -> None:
    """A long prompt does not use up the time to write lines: llama-server counts
    t_max_predict_ms from the end of prompt processing, which a chunk's `generated_s` is."""
    rules = EditorStops(n_indent=0, t_max_predict_ms=100)
    assert rules.feed("x\n", generated_s=0.05) == "x\n" and not rules.done
    assert rules.feed("y\n", generated_s=0.2) == "y\n" and rules.done
