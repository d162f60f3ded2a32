"""FIM prompts on the tiny model's vocabulary (it has Qwen2.5-Coder's FIM and repo tokens)."""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec.errors import PromptTooLongError
from localspec.fim import ExtraChunk, infill_prompt
from localspec.llama.model import LlamaModel, ModelSettings
from localspec.speculative.sources import EXTRA, SUFFIX


@pytest.fixture(scope="module")
def vocab(tiny_target: Path) -> LlamaModel:
    return LlamaModel(tiny_target, ModelSettings(vocab_only=True))


def rendered(vocab: LlamaModel, tokens: list[int]) -> str:
    """The prompt as text, control tokens spelled out (detokenize would hide them)."""
    return b"".join(vocab.piece(t) or vocab.token_text(t).encode() for t in tokens).decode()


def special(vocab: LlamaModel, name: str) -> int:
    token = vocab.special_token(name)
    assert token is not None
    return token


def test_repo_level_layout(vocab: LlamaModel) -> None:
    built = infill_prompt(
        vocab,
        "def f(",
        "):\n",
        prompt="x",
        extra=[ExtraChunk("a.py", "A = 1\n")],
        budget=1000,
        filename="b.py",
    )
    text = rendered(vocab, built.tokens)
    assert vocab.add_bos  # the tiny vocabulary wants a BOS, which comes first
    assert text == (
        "<|bos|><|repo_name|>myproject\n<|file_sep|>a.py\nA = 1\n<|file_sep|>b.py\n"
        "<|fim_prefix|>def f(x<|fim_suffix|>):\n<|fim_middle|>"
    )
    assert built.tokens[1] == special(vocab, "fim_repo")
    assert built.tokens[-1] == special(vocab, "fim_middle")
    assert (built.extra_used, built.extra_dropped) == (1, 0)


def test_the_tokens_are_llama_servers_where_the_request_names_no_file(vocab: LlamaModel) -> None:
    """llama-server's names, and each piece tokenized on its own, as its /infill does: a
    prefix ending where the prompt begins is not merged into one token across them."""
    built = infill_prompt(
        vocab, "x = th", "\n", prompt="en", extra=[ExtraChunk("a.py", "A")], budget=1000
    )

    def text(value: str) -> list[int]:
        return vocab.tokenize(value, add_special=False, parse_special=False)

    assert built.tokens == [
        vocab.bos,
        special(vocab, "fim_repo"),
        *text("myproject\n"),
        special(vocab, "fim_file_sep"),
        *text("a.py\n"),
        *text("A"),
        special(vocab, "fim_file_sep"),
        *text("filename\n"),
        special(vocab, "fim_prefix"),
        *text("x = th"),
        *text("en"),
        special(vocab, "fim_suffix"),
        *text("\n"),
        special(vocab, "fim_middle"),
    ]
    assert text("x = then") != [*text("x = th"), *text("en")]  # the split shows


def test_editor_text_cannot_inject_control_tokens(vocab: LlamaModel) -> None:
    built = infill_prompt(vocab, "<|fim_middle|>", "", budget=1000)
    assert built.tokens.count(special(vocab, "fim_middle")) == 1


def test_extra_chunks_that_do_not_fit_are_dropped_oldest_first(vocab: LlamaModel) -> None:
    chunks = [ExtraChunk(f"f{i}.py", "x" * 40) for i in range(5)]
    whole = infill_prompt(vocab, "a", "b", extra=chunks, budget=10_000)
    core = infill_prompt(vocab, "a", "b", budget=10_000)
    per_chunk = (len(whole.tokens) - len(core.tokens)) // 5
    built = infill_prompt(vocab, "a", "b", extra=chunks, budget=len(core.tokens) + 2 * per_chunk)
    assert (built.extra_used, built.extra_dropped) == (2, 3)
    assert "f4.py" in rendered(vocab, built.tokens)
    assert "f0.py" not in rendered(vocab, built.tokens)


def test_prefix_and_suffix_are_never_cut(vocab: LlamaModel) -> None:
    with pytest.raises(PromptTooLongError) as caught:
        infill_prompt(vocab, "y" * 500, "z", budget=100)
    assert caught.value.prompt_tokens > 100


class Recording:
    """The tiny vocabulary, noting the most tokens any one call built."""

    def __init__(self, vocab: LlamaModel) -> None:
        self.vocab = vocab
        self.bos, self.add_bos = vocab.bos, vocab.add_bos
        self.special_token = vocab.special_token
        self.built = 0

    def tokenize(
        self,
        text: str,
        *,
        add_special: bool = True,
        parse_special: bool = True,
        most: int | None = None,
    ) -> list[int]:
        tokens = self.vocab.tokenize(
            text, add_special=add_special, parse_special=parse_special, most=most
        )
        self.built = max(self.built, len(tokens))
        return tokens


def test_what_does_not_fit_is_counted_never_built(vocab: LlamaModel) -> None:
    """A 3.5 MB prefix and suffix were tokenized whole to be refused (411 MB at peak): the
    refusal counts them, and a dropped extra chunk is never tokenized whole either."""
    recording = Recording(vocab)
    with pytest.raises(PromptTooLongError) as caught:
        infill_prompt(recording, "y" * 5000, "z" * 3000, prompt="p", budget=100)
    whole = infill_prompt(vocab, "y" * 5000, "z" * 3000, prompt="p", budget=100_000)
    assert caught.value.prompt_tokens == len(whole.tokens)
    chunks = [ExtraChunk("big.py", "w" * 5000), ExtraChunk("small.py", "s")]
    built = infill_prompt(recording, "a", "b", extra=chunks, budget=100)
    assert (built.extra_used, built.extra_dropped) == (1, 1)
    assert "small.py" in rendered(vocab, built.tokens)
    assert recording.built <= 100


def test_regions_mark_the_suffix_and_each_extra_chunk(vocab: LlamaModel) -> None:
    """auto's n-gram lookup searches these apart (`localspec.speculative.sources`)."""
    chunks = [ExtraChunk("a.py", "A = 1\n"), ExtraChunk("c.py", "C = 3\n")]
    built = infill_prompt(vocab, "def f(", "):\n    pass\n", extra=chunks, budget=1000)
    extra = [span for span in built.regions if span.source == EXTRA]
    [suffix] = [span for span in built.regions if span.source == SUFFIX]
    assert [rendered(vocab, built.tokens[s.start : s.end]) for s in extra] == [
        "<|file_sep|>a.py\nA = 1\n",
        "<|file_sep|>c.py\nC = 3\n",
    ]
    assert rendered(vocab, built.tokens[suffix.start : suffix.end]) == "):\n    pass\n"
    assert built.tokens[suffix.start - 1] == special(vocab, "fim_suffix")
    assert suffix.end == len(built.tokens) - 1  # then only <|fim_middle|>
    # a dropped chunk has no region; without chunks only the suffix is named
    core = infill_prompt(vocab, "def f(", "):\n", budget=1000)
    assert [span.source for span in core.regions] == [SUFFIX]
