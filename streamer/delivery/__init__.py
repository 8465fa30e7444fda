"""Delivery: events built from decided passes, the durable event log (the outbox) and its
consumers: JSON lines, webhooks and MQTT (the history's is in streamer/store/)."""
