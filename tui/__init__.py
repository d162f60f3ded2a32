"""The Textual chat app (`localspec chat`), built on localspec's public API only.

`app.py` wires the pieces; `screens/` and `widgets/` are the interface; `host.py` owns the
loaded model, `generation.py` runs a turn on a worker thread, `store.py` keeps conversations
in SQLite and `settings.py` holds what each conversation is generated with.
"""
