"""Recorded episodes: the SQLite trace store, its backlog of refused writes, and their export as datasets."""
