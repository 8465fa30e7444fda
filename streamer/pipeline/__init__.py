"""A camera's runtime (frames -> inference -> tracking -> passes) and the supervisor."""
