"""`localspec models` and `doctor` say which installed models carry MTP layers: models that
can speculate without a draft model (`localspec.llama.mtp_layers`)."""

from __future__ import annotations

import json
from pathlib import Path

from localspec.models.registry import user_registry_path
from tests.test_cli import localspec
from tests.tiny_mtp_model import TinyMtpSpec, write_tiny_mtp_model

SAYS = "1 MTP (NextN) layer: can draft without a draft model"


def test_models_and_doctor_name_the_models_with_mtp_layers(
    tmp_path: Path, tiny_target: Path
) -> None:
    with_mtp = write_tiny_mtp_model(tmp_path / "mtp.gguf")
    without = write_tiny_mtp_model(tmp_path / "plain.gguf", TinyMtpSpec(mtp=False))
    user = user_registry_path()
    user.parent.mkdir(parents=True)
    user.write_text(
        f'[models."tiny-mtp"]\npath = "{with_mtp}"\n'
        f'[models."tiny-plain"]\npath = "{without}"\n'
        f'[models."tiny-llama"]\npath = "{tiny_target}"\n'
        f'[models."tiny-claims"]\npath = "{without}"\nmtp = true\n'
    )
    models = json.loads(localspec("models", "--json").stdout)["models"]
    assert models["tiny-mtp"]["mtp_layers"] == SAYS
    assert models["tiny-plain"]["mtp_layers"] is None
    assert models["tiny-llama"]["mtp_layers"] is None
    listing = localspec("models").stdout.splitlines()
    assert any(line.strip().startswith("tiny-mtp") and f"({SAYS})" in line for line in listing)
    assert not any("MTP" in line for line in listing if "tiny-plain" in line)
    [claims] = [line for line in listing if "tiny-claims" in line]
    assert "(the registry says MTP, but the file has no MTP layers)" in claims

    assert json.loads(localspec("doctor", "--json").stdout)["models_mtp"] == {"tiny-mtp": SAYS}
    doctor = localspec("doctor").stdout.splitlines()
    assert f"  tiny-mtp: {with_mtp} ({SAYS})" in doctor
    assert f"  tiny-plain: {without}" in doctor
