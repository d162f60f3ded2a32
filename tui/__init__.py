"""The Textual chat app (`localspec chat`); built in its own issue on localspec's public API."""
