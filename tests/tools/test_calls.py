"""Reading Qwen2.5's `<tool_call>` markup out of text, whole or in any pieces."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from localspec.tools.calls import CallArguments, CallOpened, CallStream, Content, Piece, parse

CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa\\"ris}", "n": [1]}}\n'
    "</tool_call>"
)
TEXTS = [
    "Just text, with a < and a <tool but no call.\n",
    "Let me look.\n" + CALL,
    CALL + "\n" + CALL.replace("get_weather", "ping") + "\n",
    '<tool_call>\n{"arguments": {"x": 1}, "name": "f"}\n</tool_call>\nDone.',  # keys reversed
    '<tool_call>\n{"name": "f", "arguments": "{\\"x\\": 1}"}\n</tool_call>',  # arguments as text
    "<tool_call>\nnot a call\n</tool_call> after",
    '<tool_call>\n{"name": "f", "arguments": {"x": [1, 2',  # cut off in the arguments
    '<tool_call>\n{"name": "f", "argu',  # cut off before the arguments
    '<tool_call>\n{"name": "f", "arguments": "{\\"x',  # cut off in arguments sent as text
    "ends in half a marker <tool_ca",
    '```json\n{\n  "name": "get_weather",\n  "arguments": {"city": "Paris"}\n}\n```',
    ' {"name": "ping", "arguments": {}}',  # a call as a JSON object, without a fence
    '```json\n{"name": "f", "argu',  # cut off before the arguments
    '```json\n{"port": 80}\n```',  # JSON, not a call
    "```python\nprint(1)\n```\n",
    "ends in half a marker <tool_ca",
    # what the 1.5B wrote to Codex CLI: its tool list echoed, then the call in a fence
    '<tools>\n{"type": "function", "function": {"name": "read_file"}}\n</tools>\n'
    '```json\n{\n  "name": "read_file",\n  "arguments": {"file_path": "hello.py"}\n}\n```',
    'A package.json:\n```json\n{"name": "app", "version": "1.0"}\n```\nDone.',  # not a call
    'Code:\n```python\nx = 1\n```\nThen:\n```\n{"name": "f", "arguments": {}}\n```',
    "ends in half a fence ``",
]


def read_in_pieces(text: str, cuts: list[int]) -> tuple[CallStream, list[Piece]]:
    stream = CallStream()
    pieces: list[Piece] = []
    start = 0
    for cut in sorted({min(cut, len(text)) for cut in cuts}):
        pieces += stream.feed(text[start:cut])
        start = cut
    pieces += stream.feed(text[start:])
    return stream, pieces + stream.close()


def test_a_call_is_its_name_and_arguments_and_no_content() -> None:
    read = parse("Let me look.\n" + CALL)
    assert read.content == "Let me look."
    [call] = read.calls
    assert call.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.arguments) == {"city": 'Pa"ris}', "n": [1]}


def test_whitespace_around_calls_is_not_content_but_plain_text_is_kept_exactly() -> None:
    assert parse(CALL + "\n" + CALL + "\n").content == ""
    assert [c.name for c in parse(CALL + "\n" + CALL).calls] == ["get_weather"] * 2
    assert parse("  two spaces, a newline\n").content == "  two spaces, a newline\n"


def test_calls_written_otherwise_are_read_at_their_end() -> None:
    reversed_keys = parse(TEXTS[3])
    assert [(c.name, c.arguments) for c in reversed_keys.calls] == [("f", '{"x": 1}')]
    assert reversed_keys.content == "Done."
    assert parse(TEXTS[4]).calls[0].arguments == '{"x": 1}'


def test_what_is_not_a_call_stays_content_markup_and_all() -> None:
    assert parse(TEXTS[5]).content == TEXTS[5]
    assert parse(TEXTS[5]).calls == []
    assert parse(TEXTS[-1]).content == TEXTS[-1]


def test_a_json_object_call_at_the_start_is_a_call() -> None:
    """What Qwen2.5-Coder-1.5B writes for a call instead of markup, fenced or not."""
    fenced = parse(TEXTS[10])
    assert [(c.name, c.arguments) for c in fenced.calls] == [("get_weather", '{"city": "Paris"}')]
    assert fenced.content == ""
    assert [(c.name, c.arguments) for c in parse(TEXTS[11]).calls] == [("ping", "{}")]
    for text in TEXTS[12:15]:  # not (yet) a call: content as it is
        assert parse(text).calls == [] and parse(text).content == text


def test_a_fenced_json_call_after_text_is_a_call_and_other_fenced_json_is_text() -> None:
    """llama.cpp's Hermes parser reads a ```json fence anywhere as a call; so does localspec,
    once the object's head is `"name": ..., "arguments":`."""
    echoed = parse(TEXTS[16])
    assert [(c.name, c.arguments) for c in echoed.calls] == [
        ("read_file", '{"file_path": "hello.py"}')
    ]
    assert echoed.content == TEXTS[16][: TEXTS[16].index("</tools>") + len("</tools>")]
    assert parse(TEXTS[17]).calls == [] and parse(TEXTS[17]).content == TEXTS[17]
    after_code = parse(TEXTS[18])
    assert [(c.name, c.arguments) for c in after_code.calls] == [("f", "{}")]
    assert after_code.content == "Code:\n```python\nx = 1\n```\nThen:"
    assert parse(TEXTS[19]).content == TEXTS[19]


def test_a_package_json_in_an_answer_streams_before_the_answer_ends() -> None:
    """Content is held only while it may still become a call."""
    stream = CallStream()
    text = 'See:\n```json\n{"name": "app", "version"'
    assert "".join(p.text for p in stream.feed(text) if isinstance(p, Content)) == text


def test_a_call_cut_off_keeps_what_it_has() -> None:
    """max_tokens ended it: the arguments so far (finish_reason says "length")."""
    assert [(c.name, c.arguments) for c in parse(TEXTS[6]).calls] == [("f", '{"x": [1, 2')]
    assert parse(TEXTS[7]).calls == [] and parse(TEXTS[7]).content == TEXTS[7]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(TEXTS), st.lists(st.integers(0, 200), max_size=12))
def test_any_pieces_read_as_the_whole_text(text: str, cuts: list[int]) -> None:
    """The streamed pieces join to the whole answer's content and calls, however it is cut."""
    whole = parse(text)
    stream, pieces = read_in_pieces(text, cuts)
    assert stream.content == whole.content
    assert [(c.name, c.arguments) for c in stream.calls] == [
        (c.name, c.arguments) for c in whole.calls
    ]
    assert "".join(p.text for p in pieces if isinstance(p, Content)) == whole.content
    opened = [p for p in pieces if isinstance(p, CallOpened)]
    assert [(p.index, p.name) for p in opened] == [(i, c.name) for i, c in enumerate(whole.calls)]
    arguments = ["" for _ in opened]
    for piece in pieces:
        if isinstance(piece, CallArguments):
            arguments[piece.index] += piece.text
    assert arguments == [c.arguments for c in whole.calls]
