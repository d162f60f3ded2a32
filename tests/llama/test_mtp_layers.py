"""Which model files carry MTP layers llama.cpp can draft with, read from their headers."""

from pathlib import Path

from localspec.llama.gguf_values import GGUFHeader, Tensor
from localspec.llama.mtp_layers import MTP_ARCHITECTURES, MtpLayers, mtp_layers, mtp_layers_of
from tests.tiny_models import patched_copy
from tests.tiny_mtp_model import TinyMtpSpec, write_tiny_mtp_model


def test_a_qwen35_file_with_a_nextn_block_can_draft_with_it(tmp_path: Path) -> None:
    found = mtp_layers(write_tiny_mtp_model(tmp_path / "mtp.gguf"))
    assert found == MtpLayers("qwen35", 1)
    assert found.usable
    assert found.describe() == "1 MTP (NextN) layer: can draft without a draft model"


def test_files_without_nextn_blocks_have_none(tmp_path: Path, tiny_target: Path) -> None:
    plain = write_tiny_mtp_model(tmp_path / "plain.gguf", TinyMtpSpec(mtp=False))
    assert mtp_layers(plain) == MtpLayers("qwen35", 0)
    assert mtp_layers(tiny_target) == MtpLayers("llama", 0)
    assert not mtp_layers(tiny_target).usable
    assert mtp_layers(tiny_target).describe() == "no MTP layers"


def test_the_key_alone_is_not_enough(tmp_path: Path) -> None:
    """A file converted without its MTP weights may keep the key: llama-server looks for the
    last block's eh_proj, and so do we."""
    with_mtp = write_tiny_mtp_model(tmp_path / "mtp.gguf")
    zeroed = patched_copy(with_mtp, tmp_path / "zero.gguf", "qwen35.nextn_predict_layers", 0)
    assert mtp_layers(zeroed).layers == 0
    header = GGUFHeader(
        {
            "general.architecture": "qwen35",
            "qwen35.block_count": 3,
            "qwen35.nextn_predict_layers": 1,
        },
        [Tensor("blk.1.nextn.eh_proj.weight", [128, 64], 0, 32768)],  # not the last block
        0,
    )
    assert mtp_layers_of(header).layers == 0


def test_an_architecture_without_an_mtp_graph_is_not_usable() -> None:
    assert "qwen35" in MTP_ARCHITECTURES and "llama" not in MTP_ARCHITECTURES
    header = GGUFHeader(
        {"general.architecture": "llama", "llama.block_count": 3, "llama.nextn_predict_layers": 1},
        [Tensor("blk.2.nextn.eh_proj.weight", [128, 64], 0, 32768)],
        0,
    )
    found = mtp_layers_of(header)
    assert found.layers == 1 and not found.usable
    assert "no MTP graph for llama" in found.describe()
    odd = GGUFHeader({"general.architecture": "qwen35", "qwen35.nextn_predict_layers": "1"}, [], 0)
    assert mtp_layers_of(odd).layers == 0
