"""The foundation every stage stands on: redaction of secrets, paths, SQLite files, logging,
the allocator, a supervisor for long-lived tasks, reconnect backoff, shard hashing, the
metrics registry, versions and listeners. It imports nothing else of the service's."""
