"""Batch jobs over corpora: `transcribe batch` and `transcribe.batch(...)` (runner.py).

inputs.py (what to do), job.py (order, tasks, results.jsonl, atomic outputs), work.py (what a
worker does with its model: decode, cut at pauses, transcribe, join), local.py (this process or
worker processes), ray_run.py (Ray Data), progress.py (the progress display), cli.py (the command).
`transcribe AUDIO... ` runs its inputs through the same executor in this process (runner.in_order).
"""
