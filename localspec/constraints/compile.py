"""Constraints compiled for one model: llguidance's tokenizer over its vocabulary, and a
per-generation `Guide` for each request's constraint.

The tokenizer is built once per model (about a second for a 152k vocabulary: it indexes every
token's bytes in a trie). A constraint is checked against `ConstraintLimits`, compiled on a
thread with a large stack (`limits.on_large_stack`: llguidance recurses) and tried for one
token, once: the compiled matcher is kept (`COMPILED_KEPT` of them) and each generation gets a
copy. Every error in a constraint is found here and raised as a `ConstraintError` carrying
llguidance's message and position; one that only shows while generating (a resource limit of
llguidance's, such as `a{1000000}`) too, by the first token tried here where it can be.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from llguidance import LLMatcher, LLParserLimits, LLTokenizer, TokenizerWrapper
from llguidance.gbnf_to_lark import gbnf_to_lark

from localspec.constraints.constraint import Constraint
from localspec.constraints.guide import Guide
from localspec.constraints.limits import (
    ConstraintLimits,
    check_limits,
    on_large_stack,
    release_freed_memory,
)
from localspec.errors import ConstraintError

ANY_OBJECT = '{"type": "object"}'
COMPILED_KEPT = 32
"""Compiled constraints kept per model (an agent sends the same tools every turn)."""

# llguidance's defaults but for the lexer's states (1-2 kB each: its 250,000 let one
# `((a{100}){100}){100}` pattern hold ~300 MB), the lexer's work per token, and short errors
# (verbose ones dump the parser's state into a 400). Per token, the default 200,000 gave up on
# the edit grammar's first code line over Qwen's 152k-token vocabulary whenever its explanation
# shared no expressions with the line (the mask then allowed only an end token); 1,000,000 is
# llguidance's own budget for the first token, and costs at most ~25 ms a token on a grammar
# built to exhaust it (measured on this project's 2-core CI machine).
_PARSER_LIMITS = LLParserLimits(
    max_lexer_states=50_000, step_lexer_fuel=1_000_000, verbose_errors=False
)


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

    def __init__(self, table: TokenTable, limits: ConstraintLimits | None = None) -> None:
        if not table.end_tokens:
            raise ConstraintError("constraint", "the model has no end-of-generation token")
        self.n_vocab = len(table.tokens)
        self.limits = limits or ConstraintLimits()
        self.tokenizer = LLTokenizer(
            TokenizerWrapper(_TableSource(table)), eos_token=list(table.end_tokens)
        )
        self._compiled: OrderedDict[Constraint, LLMatcher] = OrderedDict()
        self._lock = threading.Lock()

    def guide(self, constraint: Constraint) -> Guide:
        """A fresh matcher for one generation under `constraint`."""
        matcher = self._matcher(constraint).deep_copy()
        return Guide(matcher, self.n_vocab, constraint.kind, self.tokenizer.eos_tokens)

    def check(self, constraint: Constraint) -> None:
        """Raise `ConstraintError` now if `constraint` cannot be used (its compiled form is
        kept for the generation that follows)."""
        self._matcher(constraint)

    def _matcher(self, constraint: Constraint) -> LLMatcher:
        with self._lock:
            matcher = self._compiled.get(constraint)
            if matcher is not None:
                self._compiled.move_to_end(constraint)
                return matcher
        check_limits(constraint, self.limits)
        try:
            matcher = on_large_stack(lambda: self._compile(constraint))
        finally:
            release_freed_memory()  # a large compile's scratch, or a refused one's
        with self._lock:
            self._compiled[constraint] = matcher
            while len(self._compiled) > COMPILED_KEPT:
                self._compiled.popitem(last=False)
        return matcher

    def _compile(self, constraint: Constraint) -> LLMatcher:
        """The constraint's matcher, tried on a copy for its first token: llguidance accepts
        some constraints it then fails on at once (its lexer's or parser's limits)."""
        text = grammar_text(constraint)
        matcher = LLMatcher(self.tokenizer, text, log_level=0, limits=_PARSER_LIMITS)
        if matcher.is_error():
            raise ConstraintError(constraint.kind, matcher.get_error())
        problem = self._first_token_problem(matcher.deep_copy())
        if problem:
            # nothing of the matcher may outlive this frame: the traceback would hold it,
            # and with it the lexer's states (hundreds of MB for `^a{1000000}$`)
            del matcher
            raise ConstraintError(
                constraint.kind, f"the constraint library gave up on it: {problem}"
            )
        return matcher

    def _first_token_problem(self, trial: LLMatcher) -> str:
        """llguidance's error after its first mask and one token it allows ("" for none)."""
        bits = np.zeros((self.n_vocab + 31) // 32, dtype=np.int32)
        trial.unsafe_compute_mask_ptr(bits.ctypes.data, bits.nbytes)
        allowed = np.flatnonzero(np.unpackbits(bits.view(np.uint8), bitorder="little"))
        ends = set(self.tokenizer.eos_tokens)
        first = next((int(t) for t in allowed if t < self.n_vocab and t not in ends), None)
        if first is not None:
            trial.consume_token(first)
        return str(trial.get_error()) if trial.is_error() else ""
