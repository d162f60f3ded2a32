"""Tool calls in the format Qwen2.5 (and Hermes) write them: reading them out of generated text
(`calls`) and the grammars that make them well-formed (`grammar`). No I/O and no model: the
server reads the wire into these and renders tools through the model's chat template."""
