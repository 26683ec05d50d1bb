"""The enqueue phase: what a caller's ``apply_async`` does before a task is
published (task and per-call options, names from arguments, per-call limits,
the dedupe marker, the policy's publish).  See docs/architecture.md."""
