"""Celery apps the tests run in real ``celery worker`` subprocesses."""
