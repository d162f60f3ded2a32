"""Finding model files: local paths, or Hugging Face Hub files through `huggingface_hub`."""

from localspec.models.resolve import DEFAULT_DRAFT, DEFAULT_TARGET, resolve_model

__all__ = ["DEFAULT_DRAFT", "DEFAULT_TARGET", "resolve_model"]
