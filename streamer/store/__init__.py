"""The event history: every event, its corrections and pictures, searchable, across restarts."""
