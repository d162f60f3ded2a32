#!/usr/bin/env bash
# Greedy answers on long prompts: every speculative mode against `--spec off`, as a user meets
# them (docs/exactness.md). Four questions, each after ~1,000 tokens of a source file pinned at
# a commit, 256 tokens at temperature 0, one `localspec complete` process per run (a cold
# cache), fresh state and cache folders (no suffix store or prompt states of earlier runs).
# Extra arguments go to every run, e.g. `--cache-type-v f16` for llama.cpp's default values.
# Prints one line per question and mode, then how many answers equal plain decoding's.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# the models stay where `localspec pull` put them: Hugging Face's cache follows XDG_CACHE_HOME
export HF_HOME="${HF_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/huggingface}"
export XDG_STATE_HOME="$work/state" XDG_CACHE_HOME="$work/cache"
pin=e1c1dfd
files=(localspec/speculative/steptime.py localspec/edits/write.py
  localspec/speculative/prompt_work.py localspec/speculative/payoff.py)
questions=("Explain what this module does, step by step."
  "Find an edge case this code mishandles and fix it."
  "Write pytest tests for the main function of this module."
  "Refactor the longest function into smaller functions.")
same=0 runs=0
for i in "${!files[@]}"; do
  file="$work/$(basename "${files[$i]}")"
  git -C "$repo" show "$pin:${files[$i]}" > "$file"
  for mode in off ngram draft hybrid auto; do
    localspec complete --file "$file" --spec "$mode" --temperature 0 --max-tokens 256 --no-server \
      --json "$@" "${questions[$i]}" > "$work/$i-$mode.json" 2> "$work/$i-$mode.err"
  done
  for mode in ngram draft hybrid auto; do
    verdict=$(python3 - "$work/$i-off.json" "$work/$i-$mode.json" <<'PY'
import json, sys
plain, fast = (json.load(open(p)) for p in sys.argv[1:])
a, b = plain["text"], fast["text"]
at = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))
drafted = fast["stats"]["drafted"]
print("same" if at is None else f"differs at character {at}", f"(drafted {drafted})")
PY
)
    echo "${files[$i]} $mode: $verdict"
    runs=$((runs + 1))
    case "$verdict" in same*) same=$((same + 1)) ;; esac
  done
done
echo "$same of $runs answers equal plain decoding's"
