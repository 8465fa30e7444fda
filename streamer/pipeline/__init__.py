"""A camera's runtime (frames -> inference -> tracking -> passes), the running cameras and
their leases between replicas."""
