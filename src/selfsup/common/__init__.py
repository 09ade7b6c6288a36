"""Helpers every layer may use: run-dir names, upstream internals, version, memory, W&B; imports nothing of the lab."""
