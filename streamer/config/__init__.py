"""Configuration: one pydantic schema, read from bounded YAML with ${VAR} interpolation."""
