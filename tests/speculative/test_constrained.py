"""Constrained generation on real tiny models: one path for every mode, and still exact.

A constraint masks every position's logits before the acceptance rule; n-gram drafts are cut
at the first forbidden token, the draft model drafts from its masked logits (so min(1, p/q)
sees the masked q), and rejected tokens are rolled back out of the matcher. The tests:
greedy constrained speculation gives constrained plain decoding's tokens in every mode and
draft length, with grammars that force choices the random model would not make; sampling
under a mask reproduces the masked target distribution (chi-square), including where the
unmasked draft puts 97% of its probability on forbidden tokens; a constraint ends the
generation once complete and reports "length" when max_tokens comes first.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from localspec import Finished, Runtime, SamplingSettings
from localspec.bench.report import first_difference
from localspec.constraints import Constraint
from localspec.llama.context import LlamaContext
from localspec.runtime import constraint_compiler, tuner_route
from localspec.speculative.engine import GenerationRequest
from localspec.speculative.sampling import distribution
from tests.speculative.test_engine import NEAR_TIE, joint_pvalue, run, spec
from tests.speculative.test_ties import Parts, generate, noise_guard
from tests.speculative.test_ties import spec as guarded_spec

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "n", "ok"],
    "additionalProperties": False,
    # llguidance's own option: no free whitespace, or the random model writes newlines forever
    "x-guidance": {"whitespace_flexible": False},
}
PAIRS = "(ab|cd){3,6}x"
CONSTRAINTS = {
    "regex": Constraint.regex(PAIRS),
    "json_schema": Constraint.json_schema(SCHEMA),
    "gbnf": Constraint.gbnf('root ::= pair pair pair pair? pair? pair? "x"\npair ::= "ab" | "cd"'),
}
# every pair of the letters the grammars allow occurs here followed by "!", and the JSON keys
# by what the schema forbids: the n-gram lookup keeps proposing tokens the constraint refuses
PROMPT = 'ab!bc!cd!da!ba!dc!ad!ca! {"name": 7, "n": "x", "ok": 1}'
MODES = [("off", 1), ("auto", 8)] + [
    (mode, k) for mode in ("ngram", "draft", "hybrid") for k in (1, 2, 4, 8)
]


def assert_obeys(runtime: Runtime, constraint: Constraint, done: Finished) -> bool:
    """A finished output matches the constraint in full; a cut one is an allowed prefix.
    Returns whether it was finished (checked in full)."""
    guide = constraint_compiler(runtime.models.target_model).guide(constraint)
    assert guide.validate(done.tokens) == len(done.tokens)
    if done.finish_reason != "stop":
        return False
    guide.commit(done.tokens)
    assert guide.accepting
    if constraint.kind == "json_schema":
        jsonschema.validate(json.loads(done.text), SCHEMA)
    else:
        assert re.fullmatch(PAIRS, done.text)
    return True


def masked_gap(
    runtime: Runtime, constraint: Constraint, prompt: list[int], out: list[int]
) -> float:
    """Plain decoding's top-2 gap among the tokens the constraint allows after `out`."""
    guide = constraint_compiler(runtime.models.target_model).guide(constraint)
    guide.commit(out)
    with LlamaContext(runtime.models.target_model, 512, n_threads=1) as fresh:
        tokens = prompt + out
        for token in tokens[:-1]:
            fresh.decode([token], logits="none")
        logits = guide.constrain(fresh.decode(tokens[-1:], logits="last")[0], [])
    top = np.sort(logits)
    return float(top[-1] - top[-2])


@pytest.mark.parametrize("draft_kind", ["noisy", "exact"])
@pytest.mark.parametrize("kind", sorted(CONSTRAINTS))
def test_greedy_constrained_speculation_equals_constrained_plain_decoding(
    request: pytest.FixtureRequest, draft_kind: str, kind: str
) -> None:
    runtime: Runtime = request.getfixturevalue(draft_kind)
    constraint = CONSTRAINTS[kind]
    prompt = runtime.prompts.tokenize(PROMPT)
    plain = run(
        runtime, prompt, max_tokens=40, ignore_eos=True, spec=spec("off"), constraint=constraint
    )
    finished = int(assert_obeys(runtime, constraint, plain))
    drafted = cut = tolerated = 0
    for mode, k in MODES:
        fast = run(
            runtime,
            prompt,
            max_tokens=40,
            ignore_eos=True,
            spec=spec(mode, k),
            constraint=constraint,
        )
        finished += assert_obeys(runtime, constraint, fast)
        assert fast.stats.constraint == kind and fast.stats.masks >= fast.stats.generated_tokens
        drafted += fast.stats.drafted
        cut += fast.stats.draft_cut
        if fast.tokens == plain.tokens:
            assert fast.finish_reason == plain.finish_reason
            continue
        at = first_difference(plain.tokens, fast.tokens)
        assert at is not None
        gap = masked_gap(runtime, constraint, prompt, plain.tokens[:at])
        assert gap < NEAR_TIE, f"{mode} k={k} diverged at token {at} with masked top-2 gap {gap}"
        tolerated += 1
    assert tolerated <= 1
    assert drafted > 0 and cut > 0  # speculation ran, and the constraint cut n-gram drafts
    assert finished > 0  # some output was complete, and matched the constraint in full


def test_tokens_the_schema_forces_are_drafted_and_taken(noisy: Runtime) -> None:
    """A schema fixes its keys: the lookup proposes them as a draft (source "forced"),
    which the target takes, and the output is still plain decoding's."""
    constraint = CONSTRAINTS["json_schema"]
    plain = run(noisy, PROMPT, max_tokens=40, spec=spec("off"), constraint=constraint)
    fast = run(noisy, PROMPT, max_tokens=40, spec=spec("ngram", 8), constraint=constraint)
    assert fast.tokens == plain.tokens
    forced = fast.stats.by_proposer["forced"]
    assert forced.drafted >= len("name") and forced.accepted == forced.drafted


def test_the_constraint_forces_choices_the_model_would_not_make(noisy: Runtime) -> None:
    prompt = noisy.prompts.tokenize(PROMPT)
    free = run(noisy, prompt, max_tokens=20, ignore_eos=True, spec=spec("off"))
    assert not re.fullmatch(r"[abcdx]*", free.text)
    forced = run(
        noisy,
        prompt,
        max_tokens=20,
        ignore_eos=True,
        spec=spec("off"),
        constraint=CONSTRAINTS["regex"],
    )
    assert (
        re.fullmatch(r"((ab|cd)+x?)?", forced.text) and forced.text != free.text[: len(forced.text)]
    )


def test_guarded_constrained_speculation_gives_plain_decoding_exactly(
    tiny_target: Path, tiny_draft_noisy: Path
) -> None:
    """With the batch's rounding exaggerated, verification decodes in exact-width chunks (one
    token at a time where no width is exact), each position masked, so every mode gives plain
    decoding's tokens exactly."""
    parts = Parts(tiny_target, tiny_draft_noisy)
    compiler = constraint_compiler(parts.target_model)
    try:
        for exact_width in (3, 1):
            engine, context = parts.engine(exact_width, noise_guard(exact_width))
            engine.guides = compiler.guide
            for constraint in CONSTRAINTS.values():
                prompt = parts.target_model.tokenize(PROMPT)
                plain = generate(engine, prompt, guarded_spec("off", 1), constraint=constraint)
                for mode, k in MODES[1:]:
                    context.widths.clear()
                    fast = generate(engine, prompt, guarded_spec(mode, k), constraint=constraint)
                    assert fast.tokens == plain.tokens, (constraint.kind, mode, k)
                    assert max(context.widths, default=1) <= exact_width
    finally:
        parts.close()


# -- ends -------------------------------------------------------------------------------------


def test_a_constraint_that_cannot_finish_within_max_tokens_ends_with_length(noisy: Runtime) -> None:
    for mode in ("off", "hybrid"):
        done = run(
            noisy, "hi", max_tokens=9, spec=spec(mode, 4), constraint=Constraint.regex("(ab){50}")
        )
        assert done.finish_reason == "length" and done.text == "ababababa"


def test_a_complete_constraint_ends_the_generation_even_with_ignore_eos(noisy: Runtime) -> None:
    constraint = Constraint.regex("(ab|cd){2}x")
    for mode in ("off", "ngram", "draft", "hybrid", "auto"):
        done = run(
            noisy, PROMPT, max_tokens=50, ignore_eos=True, spec=spec(mode, 4), constraint=constraint
        )
        assert done.finish_reason == "stop" and re.fullmatch("(ab|cd){2}x", done.text), mode
        assert done.stats.generated_tokens == 5
    at_the_limit = run(noisy, PROMPT, max_tokens=5, spec=spec("off"), constraint=constraint)
    assert at_the_limit.finish_reason == "stop"  # complete, though max_tokens came too


def test_stop_strings_still_apply_under_a_constraint(noisy: Runtime) -> None:
    constraint = Constraint.regex("(ab|cd){6}x")
    full = run(noisy, PROMPT, max_tokens=50, spec=spec("off"), constraint=constraint)
    stop = full.text[4:6]
    cut = run(noisy, PROMPT, max_tokens=50, spec=spec("ngram"), constraint=constraint, stop=(stop,))
    assert cut.finish_reason == "stop" and cut.text == full.text[: full.text.index(stop)]


def test_auto_learns_constrained_routes_apart(noisy: Runtime) -> None:
    constrained = GenerationRequest([1, 2], constraint=Constraint.json_object(), route="chat")
    assert tuner_route(constrained) == "chat+json_object"
    assert tuner_route(replace(constrained, constraint=None)) == "chat"
    run(noisy, PROMPT, max_tokens=8, spec=spec("auto"), constraint=CONSTRAINTS["regex"])
    run(noisy, PROMPT, max_tokens=8, spec=spec("auto"))
    tuners = noisy.calibration._tuners
    assert tuners["complete+regex"] is not tuners["complete"]
    assert tuners["complete+regex"].acceptance is not tuners["complete"].acceptance


# -- sampling exactness under a mask --------------------------------------------------------------

SAMPLING = SamplingSettings(temperature=1.0, top_k=3)
LETTERS = Constraint.regex("[a-z ]+")  # the tiny models' favourite tokens are all outside it
SAMPLED_PROMPT = "ab ab ab ab ab ab ab ab"


def _masked_joint(runtime: Runtime, tokens: list[int]) -> dict[tuple[int, int], float]:
    """p(t1) p(t2 | t1) from the target's one-token decoding, masked, under SAMPLING."""
    compiler = constraint_compiler(runtime.models.target_model)
    with LlamaContext(runtime.models.target_model, 512, n_threads=1) as ctx:
        guide = compiler.guide(LETTERS)
        p1 = distribution(guide.constrain(ctx.sync(tokens), []), tokens, SAMPLING)
        joint = {}
        for a in np.nonzero(p1)[0]:
            after = [*tokens, int(a)]
            p2 = distribution(guide.constrain(ctx.sync(after), [int(a)]), after, SAMPLING)
            for b in np.nonzero(p2)[0]:
                joint[int(a), int(b)] = float(p1[a] * p2[b])
    return joint


def test_the_unmasked_draft_would_mostly_propose_forbidden_tokens(noisy: Runtime) -> None:
    """The premise of the draft-model case below: 97% of the draft's own probability mass
    is on tokens the constraint forbids, so its q must be the masked one."""
    noisy.load_draft()
    assert noisy.models.draft_model is not None
    tokens = noisy.prompts.tokenize(SAMPLED_PROMPT)
    allowed = constraint_compiler(noisy.models.draft_model).guide(LETTERS).allowed([])
    with LlamaContext(noisy.models.draft_model, 512, n_threads=1) as ctx:
        logits = ctx.sync(tokens).astype(np.float64)
    probs = np.exp(logits - logits.max())
    assert probs[allowed].sum() / probs.sum() < 0.05


# p_min 0.5: the masked draft's top probability is 0.6 at the first token and under 0.5 after
# most second ones, so the early stop (judged on the masked q) cuts drafts at varying lengths
@pytest.mark.parametrize(("mode", "p_min"), [("draft", 0.0), ("ngram", 0.0), ("draft", 0.5)])
def test_speculative_sampling_under_a_mask_reproduces_the_masked_target(
    noisy: Runtime, mode: str, p_min: float
) -> None:
    """Chi-square on the first two tokens over 1500 seeded generations (fixed verdict): the
    draft-model rule (min(1, p/q) with the residual, q masked) and sample-and-compare."""
    tokens = noisy.prompts.tokenize(SAMPLED_PROMPT)
    joint = _masked_joint(noisy, tokens)
    counts = dict.fromkeys(joint, 0)
    drafted = accepted = 0
    n = 1500
    for seed in range(n):
        settings = SamplingSettings(temperature=1.0, top_k=3, seed=seed)
        chosen = replace(spec(mode, 3), p_min=p_min)
        done = run(
            noisy,
            tokens,
            max_tokens=3,
            ignore_eos=True,
            sampling=settings,
            spec=chosen,
            constraint=LETTERS,
        )
        assert re.fullmatch("[a-z ]+", done.text)
        counts[done.tokens[0], done.tokens[1]] += 1
        drafted += done.stats.drafted
        accepted += done.stats.accepted
    assert drafted > 0.3 * n and accepted > 0.03 * n  # drafts ran and some were accepted
    assert joint_pvalue(joint, counts) > 0.001
