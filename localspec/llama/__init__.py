"""The thin typed layer over llama-cpp-python's low-level ctypes API: the only code touching C."""

from localspec.llama.backend import BuildInfo, build_info
from localspec.llama.context import LlamaContext
from localspec.llama.model import LlamaModel, ModelSettings

__all__ = ["BuildInfo", "LlamaContext", "LlamaModel", "ModelSettings", "build_info"]
