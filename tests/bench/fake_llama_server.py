"""A stand-in for llama.cpp's llama-server speaking the little of its protocol the bench uses.

`--help` lists the flags of a recent build; otherwise it serves /health and /completion on
the given port, echoing the prompt's first tokens with made-up timings, /infill answering
nothing with the request's text length as its prompt size, and a streamed
/v1/chat/completions of `max_tokens` one-character chunks with OpenAI's usage chunk; requests
are served at once, each on its own thread, as llama-server's slots serve them. It records its
arguments in $FAKE_SERVER_ARGS, and exits after $FAKE_SERVER_DIE_AFTER completions if set.
"""

from __future__ import annotations

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HELP = (
    "--spec-type none,draft-simple,ngram-simple,ngram-mod --spec-draft-n-max N --no-mmap "
    "--cache-reuse N -kvu, --kv-unified"
)


class Handler(BaseHTTPRequestHandler):
    completions = 0

    def _reply(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._reply({"status": "ok"})

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Handler.completions += 1
        die_after = int(os.environ.get("FAKE_SERVER_DIE_AFTER", "0"))
        if die_after and Handler.completions > die_after:
            os._exit(5)
        if self.path == "/v1/chat/completions":
            self._stream_chat(request)
            return
        if self.path == "/infill":  # the editor replay: a stand-in for the prompt's size
            text = request["input_prefix"] + request["prompt"] + request["input_suffix"]
            text += "".join(chunk["text"] for chunk in request["input_extra"])
            sizes = {"prompt_n": len(text), "cache_n": 0, "predicted_n": 0}
            self._reply({"content": "", "timings": sizes, "stop_type": "limit"})
            return
        assert request["cache_prompt"] is False and request["temperature"] == 0.0
        tokens = request["prompt"][: request["n_predict"]]
        timings = {
            "prompt_n": len(request["prompt"]),
            "prompt_ms": 1.0,
            "predicted_n": len(tokens),
            "predicted_per_second": 42.0,
        }
        if "--spec-type" in sys.argv:
            timings.update(draft_n=6, draft_n_accepted=3)
        self._reply({"tokens": tokens, "timings": timings, "stop_type": "limit"})

    def _stream_chat(self, request: dict[str, Any]) -> None:
        """Server-sent events until the connection closes (HTTP/1.0: no length needed)."""
        assert request["stream"] is True and request["stream_options"]["include_usage"] is True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        count = request["max_tokens"]
        chunks: list[Any] = [{"choices": [{"index": 0, "delta": {"content": "x"}}]}] * count
        timings = {"predicted_n": count, "predicted_per_second": 42.0}
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        chunks.append({"choices": [], "usage": {"completion_tokens": count}, "timings": timings})
        for chunk in [*chunks, "[DONE]"]:
            data = chunk if isinstance(chunk, str) else json.dumps(chunk)
            self.wfile.write(f"data: {data}\n\n".encode())
            self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the bench only reads the log when something fails."""


def main() -> None:
    if sys.argv[1:] == ["--help"]:
        print(HELP)
        return
    with open(os.environ["FAKE_SERVER_ARGS"], "a") as record:
        record.write(json.dumps(sys.argv[1:]) + "\n")
    port = int(sys.argv[sys.argv.index("--port") + 1])
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
