"""Screens of the chat app: the chat itself and its dialogs."""
