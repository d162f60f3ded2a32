"""Loading models: the GGUF pre-check, vocabulary access, and the draft compatibility check."""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec.errors import IncompatibleDraftError, ModelFileError
from localspec.llama.gguf_file import check_gguf
from localspec.llama.model import MAX_PADDING, LlamaModel, ensure_same_vocabulary
from tests.tiny_models import N_VOCAB, TinySpec, corrupt_copy, write_tiny_model


def test_valid_model_passes_the_check(tiny_target: Path) -> None:
    check_gguf(tiny_target)


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("truncated", "is truncated"),
        ("bad_magic", "is not a GGUF file"),
        ("empty", "too small to be a GGUF model"),
    ],
)
def test_corrupt_files_get_a_clear_error(
    tiny_target: Path, tmp_path: Path, how: str, message: str
) -> None:
    bad = corrupt_copy(tiny_target, tmp_path / f"{how}.gguf", how)
    with pytest.raises(ModelFileError, match=message):
        LlamaModel(bad)


def test_truncation_inside_the_tensor_data_is_caught(tiny_target: Path, tmp_path: Path) -> None:
    data = tiny_target.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:-100])  # only the last tensor is short
    with pytest.raises(ModelFileError, match=r"truncated: \d+ bytes, but its tensors need"):
        check_gguf(cut)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="not found"):
        LlamaModel(tmp_path / "nope.gguf")
    with pytest.raises(ModelFileError, match="is not a file"):
        LlamaModel(tmp_path)


def test_vocabulary_access(tiny_target: Path) -> None:
    with LlamaModel(tiny_target) as model:
        assert model.n_vocab == N_VOCAB
        tokens = model.tokenize("hello, wörld", add_special=False)
        assert model.detokenize(tokens) == "hello, wörld"
        assert model.tokenize("x")[0] == model.bos  # the tiny model asks for BOS
        im_end = model.tokenize("<|im_end|>", add_special=False)
        assert len(im_end) == 1 and model.is_end_of_generation(im_end[0])
        assert model.piece(im_end[0]) == b""  # control tokens render as nothing
        assert model.special_token("fim_prefix") is not None
        assert model.chat_template is not None and "im_start" in model.chat_template
        assert model.metadata("general.architecture") == "llama"


def test_draft_with_same_vocabulary_is_accepted(tiny_target: Path, tiny_draft_noisy: Path) -> None:
    with LlamaModel(tiny_target) as target, LlamaModel(tiny_draft_noisy) as draft:
        ensure_same_vocabulary(target, draft)


def test_draft_with_renamed_token_is_refused(
    tiny_target: Path, tiny_draft_renamed_vocab: Path
) -> None:
    """Same size, one token spelled differently: comparing sizes alone would miss it."""
    with LlamaModel(tiny_target) as target, LlamaModel(tiny_draft_renamed_vocab) as draft:
        assert target.n_vocab == draft.n_vocab
        with pytest.raises(IncompatibleDraftError, match=r"differ at token 260 .*same family"):
            ensure_same_vocabulary(target, draft)


def test_draft_with_smaller_vocabulary_is_refused(tiny_target: Path, tmp_path: Path) -> None:
    """The token the draft lacks is a real one (a control token), not padding."""
    smaller = write_tiny_model(tmp_path / "smaller.gguf", TinySpec(vocab_variant="smaller"))
    with (
        LlamaModel(tiny_target) as target,
        LlamaModel(smaller) as draft,
        pytest.raises(IncompatibleDraftError, match=f"has {N_VOCAB - 1} tokens .* is not padding"),
    ):
        ensure_same_vocabulary(target, draft)


def test_vocabularies_padded_apart_pair_either_way(tiny_target: Path, tmp_path: Path) -> None:
    """Qwen2.5's 7B pads to 152064 ids, its 0.5B to 151936: the same tokenizer."""
    padded = write_tiny_model(tmp_path / "padded.gguf", TinySpec(padding=MAX_PADDING))
    with LlamaModel(tiny_target) as target, LlamaModel(padded) as larger:
        assert larger.n_vocab == N_VOCAB + MAX_PADDING
        assert larger.is_padding(N_VOCAB) and not larger.is_padding(N_VOCAB - 1)
        ensure_same_vocabulary(larger, target)
        ensure_same_vocabulary(target, larger)


def test_vocabularies_padded_further_apart_are_refused(tiny_target: Path, tmp_path: Path) -> None:
    padded = write_tiny_model(tmp_path / "padded.gguf", TinySpec(padding=MAX_PADDING + 1))
    with (
        LlamaModel(tiny_target) as target,
        LlamaModel(padded) as larger,
        pytest.raises(IncompatibleDraftError, match=f"at most {MAX_PADDING} padding tokens"),
    ):
        ensure_same_vocabulary(larger, target)
