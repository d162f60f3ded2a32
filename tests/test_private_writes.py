"""Every file localspec writes goes through one helper (`localspec.paths`: `open_private`,
`write_private`, `private_folder`): 0600 files, 0700 folders, never through a link. The
package's sources are read for the other ways of creating a file or folder, so a new writer
cannot slip past the helper unnoticed."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from localspec.cli.bench_files import write_file
from localspec.errors import LocalspecError

ROOT = Path(__file__).resolve().parent.parent

_CREATES = re.compile(
    r"\.write_text\(|\.write_bytes\(|\bO_CREAT\b|\.mkdir\(|os\.mkdir\(|os\.makedirs\("
    r"|FileHandler\(|mkstemp\(|NamedTemporaryFile\(|(?<!os\.fd)open\([^)]*[\"'][wax]"
    r"|savefig\((?!file)"
)
_ALLOWED = {
    # the helper itself
    "localspec/paths.py": "",
    # the user's own project files, edited in place through its own no-follow folder walk
    "localspec/edits/fs.py": "",
    # model files in Hugging Face's cache layout: public weights, shared with its tools
    "localspec/models/hub_cache.py": "",
    "localspec/models/mirror.py": "",
    # the kernel's page-reclaim switch, not a file
    "localspec/bench/memory.py": "",
}


def test_no_module_creates_a_file_or_folder_but_through_the_helper() -> None:
    found = []
    for path in sorted([*(ROOT / "localspec").rglob("*.py"), *(ROOT / "tui").rglob("*.py")]):
        name = path.relative_to(ROOT).as_posix()
        if name in _ALLOWED:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _CREATES.search(line.split("#")[0]):
                found.append(f"{name}:{number}: {line.strip()}")
    assert not found, "write through localspec.paths' helpers instead:\n" + "\n".join(found)


def test_an_output_file_the_user_names_is_private_and_never_written_through_a_link(
    tmp_path: Path,
) -> None:
    """bench's --json and --markdown, whatif --json, tune --save-profile, the chat's export:
    the user's folder is left as it is, the file is theirs alone."""
    folder = tmp_path / "results"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    report = folder / "bench.json"
    write_file(report, "{}")
    assert stat.S_IMODE(report.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    elsewhere = tmp_path / "notes.txt"
    elsewhere.write_text("someone's notes")
    linked = folder / "linked.json"
    linked.symlink_to(elsewhere)
    write_file(linked, "{}")  # the link is replaced, its target untouched
    assert linked.read_text() == "{}" and not linked.is_symlink()
    assert elsewhere.read_text() == "someone's notes"
    missing = tmp_path / "missing" / "bench.json"
    with pytest.raises(LocalspecError, match="No such file or directory") as refused:
        write_file(missing, "{}")
    assert f"cannot write {missing} (" in str(refused.value)
