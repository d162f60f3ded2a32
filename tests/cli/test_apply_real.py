"""`localspec complete --apply` on the real Qwen2.5-Coder pair (marker real_model): the model
writes a SEARCH/REPLACE block for a file given with --file, and the file changes as the diff
on stderr says. Run with `pytest -m real_model tests/cli/test_apply_real.py`.

The 1.5B model follows the block format when the request spells it out (left to the default
instructions alone it often rewrites the whole file, which `--apply` takes too, since the file
was given with --file); the request here spells it out so that the SEARCH/REPLACE path runs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cli.test_apply import complete

# on a busy 2-core machine the load, prefill and ~80 tokens took over 10 minutes once
pytestmark = [pytest.mark.real_model, pytest.mark.timeout(1800)]

CALC = (
    'def add(a, b):\n    """Return the sum of a and b."""\n    return a + b\n\n\n'
    "def sub(a, b):\n    return a - b\n"
)
REQUEST = (
    "In calc.py, rename the function sub to subtract. Reply with one SEARCH/REPLACE block "
    "only: the line calc.py, then the fence, <<<<<<< SEARCH, the old lines, =======, the new "
    "lines, >>>>>>> REPLACE, the closing fence."
)


def test_the_model_s_block_changes_the_file_as_the_diff_says(
    pair_paths: tuple[Path, Path], tmp_path: Path
) -> None:
    target, draft = pair_paths
    project = tmp_path / "project"
    project.mkdir()
    (project / "calc.py").write_text(CALC)
    pair = ["--target", str(target), "--draft", str(draft), "--spec", "draft"]
    pair += ["--max-tokens", "160"]  # the block takes about 60
    done = complete(project, *pair, "--file", "calc.py", "--apply", REQUEST, timeout=1700)
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stderr
    assert "<<<<<<< SEARCH" in done.stdout  # the answer, on stdout as without --apply
    edited = (project / "calc.py").read_text()
    assert "def subtract(a, b):" in edited
    assert "def sub(" not in edited
    # the diff on stderr, applied by git to the original, gives exactly the file written
    start = done.stderr.index("--- a/calc.py")
    diff = done.stderr[start : done.stderr.index("localspec: applied", start)]
    check = tmp_path / "check"
    check.mkdir()
    (check / "calc.py").write_text(CALC)
    subprocess.run(["git", "init", "-q", str(check)], check=True)
    subprocess.run(["git", "apply"], cwd=check, input=diff, text=True, check=True)
    assert (check / "calc.py").read_text() == edited
