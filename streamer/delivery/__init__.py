"""Delivery: events built from decided passes, the durable outbox, sinks and webhooks."""
