"""`--mtp`: the commands that load models draft with the target's own MTP layers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localspec.cli import build_parser
from localspec.cli.bench_processes import model_args
from localspec.cli.options import runtime_settings
from localspec.cli.server_choice import requirements
from localspec.errors import UsageError
from localspec.remote import conflicts
from tests.cli.test_complete import run
from tests.tiny_mtp_model import TinyMtpSpec, write_tiny_mtp_model


def test_complete_drafts_with_the_head_and_prints_plain_decodings_text(tmp_path: Path) -> None:
    model = write_tiny_mtp_model(tmp_path / "mtp.gguf", TinyMtpSpec(noise=0.2))
    common = ("--target", model, "--raw", "--max-tokens", "24", "--ignore-eos", "--no-server")
    plain = run(*common, "--spec", "off", "def f(x")
    fast = run(*common, "--mtp", "--spec", "draft", "--stats", "def f(x")
    assert plain.returncode == fast.returncode == 0, plain.stderr + fast.stderr
    assert fast.stdout == plain.stdout
    stats = json.loads(fast.stderr.strip().splitlines()[-1])
    assert stats["drafted"] > 0


def test_mtp_becomes_the_runtime_setting_and_a_server_must_run_it(
    tmp_path: Path, tiny_draft_exact: Path
) -> None:
    model = write_tiny_mtp_model(tmp_path / "mtp.gguf")
    parser = build_parser()
    args = parser.parse_args(["complete", "--target", str(model), "--mtp", "p"])
    settings = runtime_settings(args, need_draft=True)  # a draft mode: the head drafts
    assert settings.mtp and settings.draft is None
    with_draft = parser.parse_args(
        ["complete", "--target", str(model), "--mtp", "--draft", str(tiny_draft_exact), "p"]
    )
    with pytest.raises(UsageError, match="no --draft"):
        runtime_settings(with_draft, need_draft=True)
    wanted = requirements(args)
    assert [c.asked for c in conflicts(wanted, {"target": model.name, "mtp": False})] == ["--mtp"]
    assert conflicts(wanted, {"target": model.name, "mtp": True}) == []
    unasked = requirements(parser.parse_args(["complete", "--target", str(model), "p"]))
    assert conflicts(unasked, {"target": model.name, "mtp": True}) == []


def test_a_processes_bench_passes_mtp_to_its_complete_processes(tmp_path: Path) -> None:
    model = write_tiny_mtp_model(tmp_path / "mtp.gguf")
    args = build_parser().parse_args(["bench", "processes", "--target", str(model), "--mtp"])
    assert "--mtp" in model_args(args)
    plain = build_parser().parse_args(["bench", "processes", "--target", "x"])
    assert "--mtp" not in model_args(plain)
