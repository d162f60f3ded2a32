"""Whether a GGUF model carries MTP (NextN) layers that llama.cpp can draft with, from its header.

`localspec models` and `doctor` say which models can speculate without a draft model: their
GGUF carries NextN blocks (`{arch}.nextn_predict_layers` > 0, the blocks appended after the
trunk's) and llama.cpp builds an MTP draft graph for their architecture. Read from the header
alone (`gguf_file.check_gguf`): milliseconds, no weights loaded. The test is llama-server's own
(`common_speculative`'s auto-detection looks for `blk.{block_count - 1}.nextn.eh_proj.weight`):
a file converted without its MTP weights may keep the key but has no such tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localspec.errors import ModelFileError
from localspec.llama.gguf_file import check_gguf
from localspec.llama.gguf_values import GGUFHeader

MTP_ARCHITECTURES = frozenset(
    {
        "bailingmoe3",
        "cohere2moe",
        "deepseek2",
        "deepseek32",
        "deepseek4",
        "glm-dsa",
        "glm4moe",
        "glm5-next",
        "hy_v3",
        "mimo2",
        "nemotron_h_moe",
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "step35",
    }
)
"""The architectures whose model builds a `LLM_GRAPH_TYPE_DECODER_MTP` graph in the llama.cpp
that llama-cpp-python 0.3.36 vendors (src/models/*.cpp); others load NextN weights, if any,
without a graph to run them."""


@dataclass(frozen=True)
class MtpLayers:
    """The NextN blocks a model file carries (`layers`, 0: none) and its architecture."""

    architecture: str
    layers: int

    @property
    def usable(self) -> bool:
        """Whether llama.cpp can draft with them (an MTP context over the model)."""
        return self.layers > 0 and self.architecture in MTP_ARCHITECTURES

    def describe(self) -> str:
        """One line for `models` and `doctor`."""
        if self.layers == 0:
            return "no MTP layers"
        blocks = f"{self.layers} MTP (NextN) layer{'s' if self.layers > 1 else ''}"
        if self.usable:
            return f"{blocks}: can draft without a draft model"
        return f"{blocks}, but this llama.cpp has no MTP graph for {self.architecture}"


def mtp_layers(path: Path) -> MtpLayers:
    """The MTP layers of the model file at `path` (`ModelFileError` if it is not a valid GGUF)."""
    return mtp_layers_of(check_gguf(path))


def mtp_summary(path: Path) -> str | None:
    """`MtpLayers.describe` for the file at `path`; None where it has no MTP layers or is not
    a valid GGUF (loading it says why)."""
    try:
        found = mtp_layers(path)
    except ModelFileError:
        return None
    return found.describe() if found.layers else None


def mtp_layers_of(header: GGUFHeader) -> MtpLayers:
    """The MTP layers a checked header declares and holds."""
    arch = header.values.get("general.architecture")
    arch = arch if isinstance(arch, str) else ""
    declared = _count(header.values.get(f"{arch}.nextn_predict_layers"))
    blocks = _count(header.values.get(f"{arch}.block_count"))
    if not declared or not blocks:
        return MtpLayers(arch, 0)
    last = f"blk.{blocks - 1}.nextn.eh_proj.weight"
    held = any(tensor.name == last for tensor in header.tensors)
    return MtpLayers(arch, declared if held else 0)


def _count(value: object) -> int:
    """`value` if a positive integer, else 0 (metadata may hold anything)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return 0
