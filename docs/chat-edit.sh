#!/usr/bin/env bash
# The README's chat screenshot: the real app in tmux on the default pair, a change request that
# adds the file with @path and asks for the edit under the grammar of its lines (/edit), the
# answer's edit shown in the diff view (F6), then applied (a); fails unless the file changed.
# Needs tmux and the installed pair (`localspec pull`); writes docs/chat-edit-*.svg.
set -euo pipefail
docs=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'tmux kill-session -t localspec-shot 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/project" "$work/data"
cat > "$work/project/stats.py" <<'PY'
def mean(values):
    return sum(values) / len(values)


def spread(values):
    return max(values) - min(values)
PY
# no system prompt: the chat asks for edits as `complete --apply` does (one construction)
tmux new-session -d -s localspec-shot -x 100 -y 34 \
  "cd $work/project && XDG_DATA_HOME=$work/data localspec chat --offline --max-tokens 220; \
   sleep 600"

wait_for() {  # a regular expression on the screen, seconds
  for _ in $(seq "$2"); do
    tmux capture-pane -p -t localspec-shot | grep -qE -- "$1" && return 0
    sleep 1
  done
  echo "timed out waiting for: $1" >&2
  tmux capture-pane -p -t localspec-shot >&2
  return 1
}

shot() {  # the pane, colours included, as an SVG (rich renders it)
  tmux capture-pane -e -p -t localspec-shot | python -c '
import sys
from rich.console import Console
from rich.text import Text
console = Console(record=True, width=100, force_terminal=True, color_system="truecolor",
                  file=open("/dev/null", "w"))
for line in sys.stdin.read().rstrip("\n").split("\n"):
    console.print(Text.from_ansi(line), overflow="crop", no_wrap=True)
console.save_svg(sys.argv[1], title="localspec chat")' "$1"
}

wait_for "ctx [0-9]+/" 300
tmux send-keys -t localspec-shot -l \
  "/edit @stats.py mean() fails on an empty list: make it return 0.0 for one."
tmux send-keys -t localspec-shot Enter
wait_for "shows the diff" 900
sleep 1
shot "$docs/chat-edit-answer.svg"
tmux send-keys -t localspec-shot F6
sleep 3
shot "$docs/chat-edit-diff.svg"
tmux send-keys -t localspec-shot a
sleep 3
echo "stats.py after the edit:"
cat "$work/project/stats.py"
grep -q "0.0" "$work/project/stats.py" || { echo "the edit was not applied" >&2; exit 1; }
