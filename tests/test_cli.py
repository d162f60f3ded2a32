"""The installed `localspec` command, run as a real subprocess on tiny models."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny_models import corrupt_copy

# the console script installed beside this interpreter (the venv need not be activated)
LOCALSPEC = str(Path(sys.executable).with_name("localspec"))


def localspec(
    *args: str | Path,
    stdin: str = "",
    env: dict[str, str] | None = None,
    unset: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """Run the command with this test's environment, plus `env`, minus the variables `unset`."""
    environment = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in unset}
    return subprocess.run(
        [LOCALSPEC, *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard: a bench on a loaded 2-core machine took 128 s
        env=environment,
        check=False,
    )


def complete(target: Path, *args: str | Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return localspec("complete", "--target", target, "--ctx-size", "256", *args, stdin=stdin)


def test_streams_the_answer_and_stats(tiny_target: Path) -> None:
    result = complete(tiny_target, "--raw", "--max-tokens", "12", "--stats", "hello there")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    stats = json.loads(result.stderr.strip().splitlines()[-1])
    assert stats["generated_tokens"] <= 12
    for key in (
        "ttft_s",
        "tokens_per_second",
        "mean_acceptance_length",
        "accepted_per_position",
        "by_proposer",
        "prefill_s",
        "verify_s",
        "draft_s",
        "sample_s",
    ):
        assert key in stats


def test_piped_stdin_comes_before_the_arguments(tiny_target: Path) -> None:
    piped = complete(tiny_target, "--raw", "--max-tokens", "10", "second part", stdin="first part")
    joined = complete(tiny_target, "--raw", "--max-tokens", "10", "first part\nsecond part")
    assert piped.returncode == joined.returncode == 0
    assert piped.stdout == joined.stdout


def test_chat_template_and_speculation_modes_agree(
    tiny_target: Path, tiny_draft_noisy: Path
) -> None:
    outputs = {
        mode: complete(
            tiny_target, "--draft", tiny_draft_noisy, "--spec", mode, "--max-tokens", "16", "hi"
        )
        for mode in ("off", "ngram", "draft", "hybrid")
    }
    assert all(r.returncode == 0 for r in outputs.values()), outputs
    assert len({r.stdout for r in outputs.values()}) == 1  # greedy: identical text


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--temperature", "-1", "x"], 2, "temperature must be a finite number >= 0"),
        (["--max-tokens", "0", "x"], 2, "--max-tokens must be at least 1"),
        (["--ubatch-size", "8", "x"], 2, "--ubatch-size: must be at least 16, not 8"),
        (["-ub", "1024", "x"], 2, "--ubatch-size: must be at most 512 (localspec's batch)"),
        (["--raw", "word " * 400], 2, "context window holds 256"),
        ([], 2, "no prompt"),
    ],
)
def test_user_errors_are_one_line_with_exit_code(
    tiny_target: Path, args: list[str], code: int, message: str
) -> None:
    result = complete(tiny_target, *args)
    assert result.returncode == code
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_bad_model_files(tiny_target: Path, tiny_draft_renamed_vocab: Path, tmp_path: Path) -> None:
    missing = complete(tmp_path / "missing.gguf", "x")
    assert missing.returncode == 1 and "model file not found" in missing.stderr
    broken = corrupt_copy(tiny_target, tmp_path / "broken.gguf", "truncated")
    truncated = complete(broken, "x")
    assert truncated.returncode == 1 and "truncated" in truncated.stderr
    mismatch = complete(tiny_target, "--draft", tiny_draft_renamed_vocab, "--spec", "draft", "x")
    assert mismatch.returncode == 1 and "same family" in mismatch.stderr
    assert "Traceback" not in missing.stderr + truncated.stderr + mismatch.stderr


def test_unknown_option_is_a_usage_error(tiny_target: Path) -> None:
    result = complete(tiny_target, "--no-such-flag")
    assert result.returncode == 2


def _hub_cache(root: Path, model: Path, repo: str, revision: str) -> Path:
    """Lay out a Hugging Face hub cache the way huggingface_hub itself writes one."""
    repo_dir = root / ("models--" + repo.replace("/", "--"))
    blob = repo_dir / "blobs" / "0123abcd"
    blob.parent.mkdir(parents=True)
    shutil.copy(model, blob)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(revision)
    snapshot = repo_dir / "snapshots" / revision / "tiny.gguf"
    snapshot.parent.mkdir(parents=True)
    snapshot.symlink_to(os.path.relpath(blob, snapshot.parent))
    return snapshot


def test_hub_reference_loads_from_the_hub_cache(tiny_target: Path, tmp_path: Path) -> None:
    revision = "a" * 40
    _hub_cache(tmp_path / "hub", tiny_target, "someone/tiny-GGUF", revision)
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    for reference in ("someone/tiny-GGUF/tiny.gguf", f"someone/tiny-GGUF/tiny.gguf@{revision}"):
        result = localspec(
            "complete", "--target", reference, "--raw", "--max-tokens", "4", "x", env=env
        )
        assert result.returncode == 0, result.stderr
    absent = localspec("complete", "--target", "someone/other-GGUF/x.gguf", "x", env=env)
    assert absent.returncode == 1
    assert "HF_HUB_OFFLINE is set" in absent.stderr
    assert "Traceback" not in absent.stderr


def test_offline_first_use_refuses_clearly() -> None:
    """Nothing cached (the test's HF_HOME is empty) and --offline: one clear line, exit 1."""
    result = localspec("complete", "--offline", "hello")
    assert result.returncode == 1
    assert "--offline forbids fetching it" in result.stderr
    assert "localspec pull" in result.stderr and "Traceback" not in result.stderr


def test_doctor_and_tune(tiny_target: Path) -> None:
    doctor = localspec("doctor", "--json")
    assert doctor.returncode == 0, doctor.stderr
    report = json.loads(doctor.stdout)
    assert report["llama_cpp_python"] and isinstance(report["gpu_offload"], bool)
    assert report["calibration"]["profiles"] == {}  # the test's user dirs are empty
    tune = localspec("tune", "--target", str(tiny_target), "--ctx-size", "256")
    assert tune.returncode == 0, tune.stderr
    profile = json.loads(tune.stdout)
    assert len(profile["verify_s"]) == 9 and profile["draft_s"] is None
    assert "measuring this machine" in tune.stderr
    again = localspec("tune", "--target", str(tiny_target), "--ctx-size", "256")
    assert "measuring" not in again.stderr  # cached
    assert len(json.loads(localspec("doctor", "--json").stdout)["calibration"]["profiles"]) == 1
    redo = localspec("tune", "--recalibrate", "--target", str(tiny_target), "--ctx-size", "256")
    assert redo.returncode == 0 and "measuring this machine" in redo.stderr
