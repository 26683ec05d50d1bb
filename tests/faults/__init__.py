"""Fault-injection suite: many client processes, seeded faults, a history checker.

``run.py`` (orchestration, report; ``python -m tests.faults.run --help``),
``client.py`` (one contending client process), ``injector.py`` (the fleet of
clients and the faults), ``history.py`` (events stamped with Redis TIME in a
recording server), ``checker.py`` (properties 1-5 from the history),
``celery_app.py`` / ``celery_run.py`` (property 6 with celery workers).
``tests/faults/test_faults.py`` runs the short mode.
"""
