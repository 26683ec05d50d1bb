"""Development tooling that is not installed with the package.

``engines``: throwaway Redis Clusters and Sentinel groups for the tests and
benchmarks of Sentinel / Cluster deployments.  The single throwaway server
(which users' own tests need too) is :mod:`celery_redislock.testing.servers`.
"""
