"""`localspec models` shows which entries are verified and which draft for themselves (MTP);
`localspec pull NAME` fetches the new entries by name, here from the fake Hub (the real one is
out of reach in tests), trusting an unverified entry's first download and checking a verified
one against the hash read from the Hub."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from localspec.cli import models as models_cli
from localspec.cli.models import describe, models_command
from localspec.models import ModelEntry, load_registry
from tests.models.fake_hub import FakeHub
from tests.models.test_pull import localspec

DATA = b"GGUF" + bytes(range(256)) * 16


def listing(capsys: pytest.CaptureFixture[str], *, as_json: bool = False) -> str:
    assert models_command(argparse.Namespace(json=as_json)) == 0
    return capsys.readouterr().out


def test_models_lists_the_new_pairs_with_what_is_verified(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = listing(capsys)
    pairs = out.split("MODELS")[0]
    assert (
        "  qwen3-coder-30b-a3b: qwen3-coder-30b-a3b-instruct-q4_k_m + qwen3-0.6b-q5_k_s "
        "[not installed, unverified]"
    ) in pairs
    assert "  qwen3-8b: qwen3-8b-q4_0 + qwen3-0.6b-q5_k_s [not installed, unverified]" in pairs
    assert "gemma" not in pairs  # no Gemma 3 pair: see models.toml
    # the default pair is verified (installed or not, on this machine)
    default = next(line for line in pairs.splitlines() if "(default)" in line)
    assert default.startswith("  qwen2.5-coder-1.5b (default): ") and "unverified" not in default
    lines = {line.split()[0]: line for line in out.split("MODELS")[1].splitlines()[1:-1]}
    assert lines["qwen3-0.6b-q5_k_s"].endswith("0.51 GiB  not installed")
    assert lines["gpt-oss-20b-q4_k_m"].endswith(
        "not installed  (unverified: first download trusted, revision not pinned)"
    )
    assert lines["qwen3.6-27b-mtp-iq4_xs"].endswith(
        "(unverified: first download trusted, revision not pinned)  (MTP: drafts for itself)"
    )


def test_models_json_carries_verified_mtp_and_tokenizer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = json.loads(listing(capsys, as_json=True))
    draft = report["models"]["qwen3-0.6b-q5_k_s"]
    assert (draft["verified"], draft["mtp"], draft["tokenizer"]) == (True, False, "qwen3")
    assert draft["vocab_size"] == 151936
    mtp = report["models"]["qwen3.6-27b-mtp-iq4_xs"]
    assert (mtp["verified"], mtp["mtp"]) == (False, True)
    assert report["pairs"]["qwen2.5-coder-1.5b"]["verified"] is True
    assert report["pairs"]["qwen3-coder-30b-a3b"]["verified"] is False


def test_once_downloaded_the_new_pairs_go_through_the_vocabulary_check(
    monkeypatch: pytest.MonkeyPatch,
    tiny_target: Path,
    tiny_draft_noisy: Path,
    tiny_draft_renamed_vocab: Path,
) -> None:
    """The registry's tokenizer names are a claim read from pages; the files decide. Stand-in
    GGUFs play the downloaded models: a same-vocabulary draft passes, a renamed token fails."""
    files = {
        "qwen3-coder-30b-a3b-instruct-q4_k_m": tiny_target,
        "qwen3-0.6b-q5_k_s": tiny_draft_noisy,
        "qwen3-8b-q4_0": tiny_draft_renamed_vocab,
    }

    def installed(entry: ModelEntry, cache: Path | None = None) -> Path | None:
        return files.get(entry.name)

    monkeypatch.setattr(models_cli, "installed_path", installed)
    pairs = describe(load_registry())["pairs"]
    coder, qwen3 = pairs["qwen3-coder-30b-a3b"], pairs["qwen3-8b"]
    assert (coder["installed"], coder["compatible"], coder["problems"]) == (True, True, [])
    assert (qwen3["installed"], qwen3["compatible"]) == (True, False)
    assert "differ at token 260" in qwen3["problems"][0]
    assert pairs["llama-3.1-8b"]["installed"] is False  # neither side is here


def test_pull_fetches_unverified_models_by_name_and_trusts_their_first_download(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "hub"
    files = {
        ("ggml-org/gemma-3-4b-it-GGUF", "gemma-3-4b-it-Q4_K_M.gguf"): DATA,
        ("lmstudio-community/gemma-3-1b-it-GGUF", "gemma-3-1b-it-Q4_K_M.gguf"): DATA[::-1],
    }
    names = ("gemma-3-4b-it-q4_k_m", "gemma-3-1b-it-q4_k_m")
    with FakeHub(files, "0" * 40) as hub:
        result = localspec("pull", *names, endpoint=hub.url, cache=cache)
    assert result.returncode == 0, result.stderr
    pulled = [line.split("\t")[:2] for line in result.stdout.splitlines()]
    assert pulled == [[name, "hub"] for name in names]
    told = [line for line in result.stderr.splitlines() if "not verified by localspec" in line]
    assert [line.split(" is not")[0] for line in told] == list(names)


def test_pull_checks_a_verified_entry_against_the_hash_read_from_the_hub(
    tmp_path: Path,
) -> None:
    """The fake Hub serves other bytes under the Qwen3 draft's pinned revision: refused."""
    cache = tmp_path / "hub"
    revision = "cc7badb2d88936cd7850e11ec30ae647de29f9e0"
    files = {("QuantFactory/Qwen3-0.6B-GGUF", "Qwen3-0.6B.Q5_K_S.gguf"): DATA}
    with FakeHub(files, revision) as hub:
        result = localspec("pull", "qwen3-0.6b-q5_k_s", endpoint=hub.url, cache=cache)
    assert result.returncode == 1
    assert f"downloading QuantFactory/Qwen3-0.6B-GGUF/Qwen3-0.6B.Q5_K_S.gguf ({revision[:12]})" in (
        result.stderr
    )
    assert f"{len(DATA)} bytes instead of 543579232; it was removed" in result.stderr
    assert "not verified" not in result.stderr
