"""Models of the real shapes with random weights, and the step costs measured on them (what a
lent GPU runs in `.ci/gpu/check.sh`), here on the "mini" shape and the 0.5B shape's tensors."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import pytest

from localspec.bench import step_costs
from localspec.bench.random_models import SHAPES, main, tensor_shapes, vocabulary
from localspec.llama.context import LlamaContext
from localspec.llama.model import LlamaModel


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("shapes") / "mini.gguf"
    assert main(["mini", str(path), "--threads", "1"]) == 0
    return path


def test_the_file_is_a_q4_k_m_qwen2_model_llama_cpp_loads(mini: Path) -> None:
    reader = gguf.GGUFReader(mini)
    fields = reader.fields
    assert bytes(fields["general.architecture"].parts[-1]).decode() == "qwen2"
    assert int(fields["general.file_type"].parts[-1][0]) == 15  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    assert not mini.with_suffix(".f16.gguf").exists()  # the F16 step is removed
    with LlamaModel(mini) as model, LlamaContext(model, 256) as context:
        assert model.n_vocab == SHAPES["mini"].n_vocab
        _, logits = context.prefill_logits([1, 2, 3])
        assert logits is not None


def test_the_real_shapes_have_the_real_tensor_counts() -> None:
    # llama.cpp's qwen2 files: 12 tensors a layer, the embedding and the output norm, plus
    # an output projection where it is not tied (7B)
    assert len(tensor_shapes(SHAPES["0.5b"])) == 24 * 12 + 2
    assert len(tensor_shapes(SHAPES["1.5b"])) == 28 * 12 + 2
    assert len(tensor_shapes(SHAPES["7b"])) == 28 * 12 + 3
    tokens, types, _ = vocabulary(SHAPES["7b"].n_vocab)
    assert len(tokens) == len(set(tokens)) == len(types) == 152064
    assert tokens[-3:] == ["<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]


def test_step_costs_measures_every_width_and_prompt_size(mini: Path, tmp_path: Path) -> None:
    out = tmp_path / "costs.json"
    args = [str(mini), "--draft", str(mini), "--out", str(out), "--ctx-size", "2600"]
    assert step_costs.main(args) == 0
    report = json.loads(out.read_text())
    assert len(report["verify_s"]) == len(report["tie_noise"]) == step_costs.WIDTHS
    assert report["verify_s"] == sorted(report["verify_s"])  # made non-decreasing
    assert list(report["prompt_tokens_per_s"]) == ["512", "2048"]  # 8192 does not fit 2600
    assert report["host"]["step_ms"] >= report["host"]["llama_decode_ms"] > 0
    assert report["draft_s"] > 0
    assert report["gpu_offload"] is False and report["gpus"] == []
