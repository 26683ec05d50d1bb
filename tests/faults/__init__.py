"""Fault-injection suite: many client processes, random faults, a history checker.

See ``run.py`` for the design and ``python -m tests.faults.run --help``.
"""
