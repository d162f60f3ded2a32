"""Hardware profiles for `localspec whatif`: saved, shipped, and one assumed GPU.

A profile is what `localspec tune --save-profile` writes: the calibration (verification cost
per batch size, draft token, catch-up per token, kernel noise) and what it was measured on.
The measured profiles shipped in `localspec/profiles/` each name their machine, models and
command; `whatif` predicts for every one of them. `ASSUMED_GPU` is not a measurement: it is
the shape a consumer GPU is expected to have (a batch of 8 at ~1.09x one token, a draft
token at 0.1x, catching up nearly free), kept, and labelled so, until a measured GPU profile
is shipped.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from localspec.context_files import read_text_file
from localspec.errors import UsageError
from localspec.speculative.tuner import HardwareProfile

ASSUMED_GPU = HardwareProfile(
    verify_s=tuple((1.0 + 0.0125 * b) * 1e-3 for b in range(17)),
    draft_s=0.1e-3,
    catchup_s=0.005e-3,  # a 0.5B draft prefilling in batches: ~5% of a draft token each
)
ASSUMED_GPU_LABEL = "an assumed GPU (not measured: verify 8 = 1.09x, draft 0.1x)"


def read_profile(path: Path) -> HardwareProfile:
    """A profile as `localspec tune` prints or saves it: {"verify_s": [...], "draft_s": ...}."""
    try:
        return _profile(json.loads(read_text_file(path)), str(path))
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{path} is not a hardware profile (not JSON: {exc})") from exc


def _profile(data: Any, where: str) -> HardwareProfile:
    try:
        profile = HardwareProfile.from_dict(data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(
            f"{where} is not a hardware profile ({exc!r}): save `localspec tune --save-profile "
            'FILE` on the machine in question, e.g. {"verify_s": [0.03, 0.045], "draft_s": 0.01}'
        ) from exc
    if not profile.verify_s or any(cost <= 0 for cost in profile.verify_s):
        raise UsageError(f"{where}: verify_s must be a list of positive seconds")
    return profile


def shipped_profiles() -> dict[str, HardwareProfile]:
    """The measured profiles in `localspec/profiles/`, by a label saying what each one is."""
    found: dict[str, HardwareProfile] = {}
    for entry in sorted(resources.files("localspec").joinpath("profiles").iterdir(), key=str):
        if not entry.name.endswith(".json"):
            continue
        data = json.loads(entry.read_text())
        found[describe(data, entry.name)] = _profile(data, f"localspec/profiles/{entry.name}")
    return found


def describe(data: dict[str, Any], name: str) -> str:
    """The label whatif prints: machine, target + draft, the file and when it was measured."""
    models = data.get("models") or {}
    pair = " + ".join(str(m) for m in (models.get("target"), models.get("draft")) if m)
    what = ", ".join(part for part in (data.get("machine"), pair) if part)
    return f"{what or name} (shipped {name}, measured {data.get('measured', '?')})"
