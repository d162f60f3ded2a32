"""Constraints compiled for one model: llguidance's tokenizer over its vocabulary, and a
per-generation `Guide` for each request's constraint.

The tokenizer is built once per model (about a second for a 152k vocabulary: it indexes every
token's bytes in a trie); a matcher per generation then costs well under a millisecond for
the schemas editors send. Every error in a constraint is found here, when the matcher is
built, and raised as a `ConstraintError` carrying llguidance's message and position.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from llguidance import LLMatcher, LLTokenizer, TokenizerWrapper
from llguidance.gbnf_to_lark import gbnf_to_lark

from localspec.constraints.constraint import Constraint
from localspec.constraints.guide import Guide
from localspec.errors import ConstraintError

ANY_OBJECT = '{"type": "object"}'


@dataclass(frozen=True)
class TokenTable:
    """A vocabulary in the terms llguidance needs (see `localspec.llama.vocab`).

    `tokens[i]` is token i's bytes, special tokens starting with 0xFF; `end_tokens` end a
    generation, and the matcher allows them exactly where the constraint is satisfied;
    `tokenize` turns bytes into tokens (llguidance uses it for forced text, not for masks).
    """

    tokens: Sequence[bytes]
    end_tokens: Sequence[int]
    tokenize: Callable[[bytes], list[int]]
    bos: int | None = None


class _TableSource:
    """The attributes llguidance's `TokenizerWrapper` reads from a tokenizer object."""

    def __init__(self, table: TokenTable) -> None:
        self.tokens = list(table.tokens)
        self.eos_token_id = table.end_tokens[0]
        self.bos_token_id = table.bos
        self.special_token_ids: list[int] = []  # already marked with 0xFF in `tokens`
        self._tokenize = table.tokenize

    def __call__(self, data: bytes) -> list[int]:
        return self._tokenize(data)


@lru_cache(maxsize=64)
def grammar_text(constraint: Constraint) -> str:
    """llguidance's grammar for `constraint`; errors of conversion (not JSON, GBNF syntax)
    raise here, the grammar's own when a matcher is built from it."""
    kind, source = constraint.kind, constraint.source
    if kind == "json_object":
        return LLMatcher.grammar_from_json_schema(ANY_OBJECT)
    if kind == "json_schema":
        try:
            schema = json.loads(source)
        except json.JSONDecodeError as exc:
            raise ConstraintError(kind, f"not valid JSON: {exc}") from exc
        if not isinstance(schema, dict | bool):
            raise ConstraintError(kind, "a JSON schema is an object (or true or false)")
        return LLMatcher.grammar_from_json_schema(json.dumps(schema))
    if kind == "regex":
        return LLMatcher.grammar_from_regex(source)
    if kind == "gbnf":
        try:
            source = gbnf_to_lark(source)
        except Exception as exc:  # the converter raises plain Exception for undefined rules
            raise ConstraintError(kind, str(exc)) from exc
    return LLMatcher.grammar_from_lark(source)


class ConstraintCompiler:
    """One model's vocabulary in llguidance's terms, and the guides built over it."""

    def __init__(self, table: TokenTable) -> None:
        if not table.end_tokens:
            raise ConstraintError("constraint", "the model has no end-of-generation token")
        self.n_vocab = len(table.tokens)
        self.tokenizer = LLTokenizer(
            TokenizerWrapper(_TableSource(table)), eos_token=list(table.end_tokens)
        )

    def guide(self, constraint: Constraint) -> Guide:
        """A fresh matcher for one generation under `constraint`."""
        matcher = LLMatcher(self.tokenizer, grammar_text(constraint), log_level=0)
        if matcher.is_error():
            raise ConstraintError(constraint.kind, matcher.get_error())
        return Guide(matcher, self.n_vocab, constraint.kind, self.tokenizer.eos_tokens)

    def check(self, constraint: Constraint) -> None:
        """Raise `ConstraintError` now if `constraint` cannot be used (nothing is kept)."""
        self.guide(constraint)
