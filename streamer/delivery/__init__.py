"""Delivery: events built from decided passes, the durable outbox, its sinks, webhooks and MQTT."""
