"""The generated tiny models load and behave as the rest of the suite assumes, in real llama.cpp."""

from pathlib import Path

import jinja2
import llama_cpp
import numpy as np
import pytest
from numpy.typing import NDArray

from tests.tiny_models import (
    BOS_TOKEN,
    CHAT_TEMPLATE,
    IM_END_TOKEN,
    IM_START_TOKEN,
    N_VOCAB,
    SPECIAL_TOKENS,
    TinySpec,
    corrupt_copy,
    special_token_id,
    write_tiny_model,
)

PROMPT = "def fibonacci(n):"
STEPS = 48


def load(path: Path) -> llama_cpp.Llama:
    return llama_cpp.Llama(model_path=str(path), n_ctx=256, verbose=False, logits_all=False)


def last_logits(llm: llama_cpp.Llama) -> NDArray[np.float32]:
    """The logits after the last evaluated token; `Llama.scores` is only kept with logits_all."""
    logits = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(logits, shape=(llm.n_vocab(),))


def greedy(path: Path, prompt: list[int], steps: int) -> list[int]:
    llm = load(path)
    llm.eval(prompt)
    out: list[int] = []
    for _ in range(steps):
        out.append(int(np.argmax(last_logits(llm))))
        llm.eval(out[-1:])
    return out


def forced_choices(path: Path, prompt: list[int], continuation: list[int]) -> list[int]:
    """The model's greedy choice at each position of `continuation`, fed the continuation."""
    llm = load(path)
    llm.eval(prompt)
    choices: list[int] = []
    for token in continuation:
        choices.append(int(np.argmax(last_logits(llm))))
        llm.eval([token])
    return choices


@pytest.mark.parametrize(
    "fixture", ["tiny_target", "tiny_draft_exact", "tiny_draft_noisy", "tiny_draft_renamed_vocab"]
)
def test_fixture_models_load(fixture: str, request: pytest.FixtureRequest) -> None:
    llm = load(request.getfixturevalue(fixture))
    assert llm.n_vocab() == N_VOCAB
    assert llm.n_ctx() == 256
    assert llm.metadata["tokenizer.chat_template"] == CHAT_TEMPLATE


def test_utf8_text_round_trips(tiny_target: Path) -> None:
    llm = load(tiny_target)
    text = "hello, wörld"
    tokens = llm.tokenize(text.encode(), add_bos=False)
    assert len(tokens) < len(text.encode())  # some merges apply
    assert llm.detokenize(tokens).decode() == text


def test_special_tokens_are_single_control_tokens(tiny_target: Path) -> None:
    llm = load(tiny_target)
    assert llm.token_bos() == special_token_id(BOS_TOKEN)
    assert llm.tokenize(b"hi", add_bos=True)[0] == llm.token_bos()
    for text in SPECIAL_TOKENS:
        assert llm.tokenize(text.encode(), add_bos=False, special=True) == [special_token_id(text)]
    assert len(llm.tokenize(IM_START_TOKEN.encode(), add_bos=False, special=False)) > 1
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    assert llama_cpp.llama_vocab_is_eog(vocab, special_token_id(IM_END_TOKEN))
    assert llama_cpp.llama_vocab_fim_pre(vocab) == special_token_id("<|fim_prefix|>")


def test_chat_template_renders_chatml() -> None:
    rendered = jinja2.Template(CHAT_TEMPLATE).render(
        messages=[{"role": "user", "content": "hi"}], add_generation_prompt=True
    )
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_exact_draft_matches_target(tiny_target: Path, tiny_draft_exact: Path) -> None:
    assert tiny_target.read_bytes() == tiny_draft_exact.read_bytes()
    prompt = load(tiny_target).tokenize(PROMPT.encode())
    assert greedy(tiny_draft_exact, prompt, STEPS) == greedy(tiny_target, prompt, STEPS)


def test_noisy_draft_agrees_partially(tiny_target: Path, tiny_draft_noisy: Path) -> None:
    prompt = load(tiny_target).tokenize(PROMPT.encode())
    continuation = greedy(tiny_target, prompt, STEPS)
    assert greedy(tiny_draft_noisy, prompt, STEPS) != continuation
    choices = forced_choices(tiny_draft_noisy, prompt, continuation)
    agreement = np.mean(np.array(choices) == continuation)
    assert 0.2 < agreement < 0.9


def test_vocabulary_variants(tiny_target: Path, tiny_draft_renamed_vocab: Path) -> None:
    target, renamed = load(tiny_target), load(tiny_draft_renamed_vocab)
    pieces = [target.detokenize([i], special=True) for i in range(N_VOCAB)]
    renamed_pieces = [renamed.detokenize([i], special=True) for i in range(N_VOCAB)]
    assert sum(a != b for a, b in zip(pieces, renamed_pieces, strict=True)) == 1


def test_smaller_vocabulary_drops_last_special(tmp_path: Path) -> None:
    llm = load(write_tiny_model(tmp_path / "small.gguf", TinySpec(vocab_variant="smaller")))
    assert llm.n_vocab() == N_VOCAB - 1
    assert len(llm.tokenize(SPECIAL_TOKENS[-1].encode(), add_bos=False, special=True)) > 1


@pytest.mark.parametrize("how", ["truncated", "bad_magic", "empty"])
def test_corrupt_copies_fail_to_load(how: str, tiny_target: Path, tmp_path: Path) -> None:
    broken = corrupt_copy(tiny_target, tmp_path / f"{how}.gguf", how)
    with pytest.raises(ValueError, match="Failed to load model"):
        load(broken)
