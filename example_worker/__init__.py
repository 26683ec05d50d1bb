"""A small, realistic Celery app that uses celery-redislock (see ``app.py``).

``python -m example_worker.demo`` runs it end to end; the docker compose
file at the repository root runs the same app on containers.
"""
