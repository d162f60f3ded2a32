"""The shipped agent traces name no folder of the machine that recorded them.

Claude Code, Codex CLI and opencode put their working folder and their own home folders into
every prompt; the traces ship with the package, so those are one neutral placeholder, the same
in every trace (a replay's prompts stay alike across clients, as the recordings were).
"""

from __future__ import annotations

import json
import re

from localspec.bench.agent import shipped_traces

PLACEHOLDER = "/home/user/project"
# the recording machine's folders: its work tree, root's home, the agents' homes there
MACHINE_FOLDERS = re.compile(r"/(?:work|root)/|/tmp/rec|-work-agent|agent-scratch|-tmp-rec")


def test_the_traces_carry_the_placeholder_not_the_recording_machines_folders() -> None:
    traces = shipped_traces() + shipped_traces(interactive=True)
    assert len(traces) == 6
    for path in traces:
        text = path.read_text()
        assert MACHINE_FOLDERS.findall(text) == [], path.name
        assert PLACEHOLDER in text, path.name
        for line in text.splitlines():
            json.loads(line)  # the replacement kept every line a JSON object
