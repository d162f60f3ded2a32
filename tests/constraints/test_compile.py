"""Constraints compiled for a real (tiny) llama.cpp vocabulary: the token table, the guide's
operations, and bad constraints refused with llguidance's own message."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from localspec import GenerationRequest, Runtime, RuntimeSettings
from localspec.constraints import Constraint, ConstraintError
from localspec.constraints.compile import ConstraintCompiler
from localspec.llama.model import LlamaModel, ModelSettings
from localspec.llama.vocab import SPECIAL_MARKER, end_of_generation_tokens, token_bytes
from localspec.runtime import constraint_compiler
from tests.tiny_models import EOS_TOKEN, IM_END_TOKEN, N_VOCAB, special_token_id


@pytest.fixture(scope="module")
def model(tiny_target: Path) -> Iterator[LlamaModel]:
    with LlamaModel(tiny_target, ModelSettings(vocab_only=True)) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def compiler(model: LlamaModel) -> ConstraintCompiler:
    return constraint_compiler(model)


def ids(text: str) -> list[int]:
    """The tiny vocabulary's byte tokens for ASCII `text` (token i < 256 is byte i)."""
    return list(text.encode())


def allowed_bytes(mask: np.ndarray) -> set[bytes]:
    return {bytes([t]) for t in np.flatnonzero(mask) if t < 256}


def test_the_token_table_marks_special_tokens_and_lists_the_end_tokens(model: LlamaModel) -> None:
    table = token_bytes(model)
    assert len(table) == N_VOCAB
    assert table[ord("a")] == b"a" and table[0] == b"\x00"
    assert table[special_token_id(IM_END_TOKEN)] == SPECIAL_MARKER + IM_END_TOKEN.encode()
    ends = end_of_generation_tokens(model)
    assert ends[0] == model.eos == special_token_id(EOS_TOKEN)
    assert special_token_id(IM_END_TOKEN) in ends


def test_masks_follow_the_grammar_and_allow_an_end_only_when_complete(
    compiler: ConstraintCompiler, model: LlamaModel
) -> None:
    guide = compiler.guide(Constraint.regex("(ab|cd){2}x?"))
    assert allowed_bytes(guide.allowed([])) == {b"a", b"c"}
    assert allowed_bytes(guide.allowed(ids("a"))) == {b"b"}
    assert not guide.allowed(ids("ab"))[model.eos]
    complete = guide.allowed(ids("abcd"))
    assert allowed_bytes(complete) == {b"x"} and complete[model.eos]
    assert not guide.allowed([])[model.eos]  # rolled back to the start: still exact
    guide.commit(ids("abcdx"))
    assert guide.stopped and guide.accepting
    assert np.flatnonzero(guide.allowed([])).tolist() == end_of_generation_tokens(model)


def test_validate_gives_the_longest_allowed_prefix_and_leaves_no_trace(
    compiler: ConstraintCompiler,
) -> None:
    guide = compiler.guide(Constraint.regex("(ab|cd){3}"))
    assert guide.validate(ids("abcdxab")) == 4
    assert guide.validate(ids("ba")) == 0
    guide.commit(ids("ab"))
    assert guide.validate(ids("cdab")) == 4
    assert allowed_bytes(guide.allowed([])) == {b"a", b"c"}


def test_forced_tokens_are_what_the_constraint_leaves_no_choice_about(
    compiler: ConstraintCompiler,
) -> None:
    guide = compiler.guide(Constraint.regex("abc(d|e)f"))
    assert guide.forced() == ids("abc")
    guide.commit(ids("abc"))
    assert guide.forced() == []  # d or e
    guide.commit(ids("d"))
    assert guide.forced() == ids("f")


def test_commit_after_a_judged_draft_rolls_back_what_was_rejected(
    compiler: ConstraintCompiler,
) -> None:
    """The engine's step: masks at every draft position, then only a prefix is emitted."""
    guide = compiler.guide(Constraint.regex("(ab|cd)+"))
    fresh = compiler.guide(Constraint.regex("(ab|cd)+"))
    draft = ids("abab")
    masks = [guide.allowed(draft[:i]).copy() for i in range(len(draft) + 1)]
    assert masks[0].tolist() == guide.allowed([]).tolist()  # reused, not recomputed
    guide.commit(ids("abc"))  # two accepted, the target chose "c" instead of the second "a"
    fresh.commit(ids("abc"))
    assert guide.allowed([]).tolist() == fresh.allowed([]).tolist()
    assert allowed_bytes(guide.allowed([])) == {b"d"}
    assert guide.masks == 6 and guide.seconds > 0


def test_every_kind_compiles(compiler: ConstraintCompiler) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    for constraint in (
        Constraint.json_schema(schema),
        Constraint.json_schema('{"type": "string"}'),
        Constraint.json_object(),
        Constraint.regex("[0-9]+"),
        Constraint.gbnf('root ::= ("ab" | "cd")+ "x"'),
        Constraint.lark('start: "a"+ "b"'),
    ):
        compiler.check(constraint)
    guide = compiler.guide(Constraint.json_object())
    assert allowed_bytes(guide.allowed([])) <= {b"{", b" ", b"\n", b"\t", b"\r"}


# fine until a line starts, then past llguidance's lexer budget for one token
LINE_PAST_THE_BUDGET = (
    'start: "ab\\n" X\n'
    "X: /[^\\n]{0,9000}/ & ~/[a-y]{0,4500}z[^\\n]{0,4499}/ & ~/[b-z]{0,3000}a[^\\n]{0,5999}/"
)


def test_a_mask_past_the_librarys_budget_raises_rather_than_allowing_only_the_end(
    compiler: ConstraintCompiler,
) -> None:
    """llguidance gives up on some tokens only when their mask is computed; its mask then
    holds the end tokens alone, and generation would stop as if the answer were done."""
    guide = compiler.guide(Constraint.lark(LINE_PAST_THE_BUDGET))
    assert allowed_bytes(guide.allowed(ids("ab\n"))) >= {b"q"}
    with pytest.raises(ConstraintError) as raised:
        guide.allowed(ids("ab\nq"))
    assert "gave up" in raised.value.problem


BAD = [
    (Constraint.json_schema("{not json"), "not valid JSON"),
    (Constraint.json_schema("[1, 2]"), "a JSON schema is an object"),
    (Constraint.json_schema({"type": "strin"}), "Invalid type: strin"),
    (
        Constraint.json_schema({"type": "string", "not": {"const": "a"}}),
        'Unimplemented keys: ["not"]',
    ),
    (Constraint.regex("(ab"), "unclosed group"),
    (Constraint.lark("start: foo"), 'unknown name: "foo"'),
    (Constraint.gbnf('root ::= "a" | ('), "Expected ')' at line 1"),
    (Constraint.gbnf('root ::= "a" bogus'), "Rule 'bogus' not found"),
]


@pytest.mark.parametrize(("constraint", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_constraints_are_refused_with_the_librarys_message(
    compiler: ConstraintError, constraint: Constraint, message: str
) -> None:
    with pytest.raises(ConstraintError) as raised:
        compiler.check(constraint)  # type: ignore[attr-defined]
    assert message in raised.value.problem
    assert raised.value.kind == constraint.kind
    assert raised.value.exit_code == 2 and "or send the request without it" in str(raised.value)


def test_unknown_kinds_and_unserialisable_schemas_are_refused() -> None:
    with pytest.raises(ConstraintError, match="unknown constraint kind"):
        Constraint("yaml", "a: 1")  # type: ignore[arg-type]
    with pytest.raises(ConstraintError, match="not JSON data"):
        Constraint.json_schema({"type": {1, 2}})


def test_the_runtime_refuses_a_bad_constraint_before_generating(tiny_target: Path) -> None:
    settings = RuntimeSettings(target=tiny_target, n_ctx=256, n_threads=1)
    with Runtime(settings) as runtime:
        bad = Constraint.regex("(ab")
        with pytest.raises(ConstraintError, match="unclosed group"):
            runtime.check_constraint(bad)
        prompt = runtime.prompts.tokenize("hi")
        events = runtime.generate(GenerationRequest(prompt, max_tokens=4, constraint=bad))
        with pytest.raises(ConstraintError):
            next(events)
        runtime.check_constraint(Constraint.regex("(ab)+"))
        assert runtime.models.target_context.n_past == 0  # nothing was decoded for the bad request


def test_a_schema_within_the_limits_that_recurses_deeply_compiles(
    compiler: ConstraintCompiler,
) -> None:
    """200 definitions, each 20 objects deep around a `$ref` to the next (246 KB): under every
    limit, and deeper than an 8 MiB thread stack holds (SIGSEGV before compiling moved to a
    thread with a large one)."""
    nest = '{"type": "object", "required": ["a"], "properties": {"a": '
    defs = ", ".join(
        f'"d{i}": ' + nest * 20 + f'{{"$ref": "#/$defs/d{i + 1}"}}' + "}}" * 20 for i in range(200)
    )
    schema = f'{{"$ref": "#/$defs/d0", "$defs": {{{defs}, "d200": {{"type": "string"}}}}}}'
    compiler.check(Constraint.json_schema(schema))


@pytest.mark.parametrize(
    ("kind", "source", "limit"),
    [
        ("gbnf", "root ::= r0\n" + "".join(f"r{i} ::= r{i + 1}\n" for i in range(1001)), "rules"),
        ("json_schema", '{"items": ' * 65 + "{}" + "}" * 65, "depth"),
        ("regex", "a" * 300_000, "bytes"),
    ],
)
def test_constraints_past_a_limit_are_refused_before_compiling(
    compiler: ConstraintCompiler, kind: str, source: str, limit: str
) -> None:
    option = {"rules": "--max-constraint-rules", "depth": "--max-constraint-depth"}
    with pytest.raises(ConstraintError, match=option.get(limit, "--max-grammar-bytes")):
        compiler.check(Constraint(kind, source))  # type: ignore[arg-type]
