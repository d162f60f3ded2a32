"""Where localspec keeps per-user files that several surfaces need to agree on.

Only platformdirs is imported here, so a command that just needs to find a running server
(`complete`) does not load the server stack to learn where its socket is.
"""

from __future__ import annotations

from pathlib import Path

import platformdirs


def default_socket_path() -> Path:
    """The server's Unix socket: in the user's runtime folder (private, cleared at logout)."""
    return platformdirs.user_runtime_path("localspec") / "localspec.sock"


def token_path() -> Path:
    """The bearer token TCP clients send (0600)."""
    return platformdirs.user_config_path("localspec") / "server-token"
