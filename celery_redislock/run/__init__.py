"""The run phase: how a run in a worker gets its lease (admission), the lease
set it holds, the worker-side request that watches it, and its release.
See docs/architecture.md."""
