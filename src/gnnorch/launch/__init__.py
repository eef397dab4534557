"""Launching the user's function: topology, core plans, rank processes, failure handling.

Ground floor (`topology`, `plan`, `serialize`) knows nothing of processes; `context` holds the
per-process rank state; `worker` is a rank's entry point and `supervisor` starts and watches the
ranks from the caller's process; `inprocess` is the one-rank path that starts nothing.
"""
