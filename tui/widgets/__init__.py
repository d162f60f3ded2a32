"""Widgets of the chat app: messages, prompt, status bar, conversation list."""
