"""The embedded CPU Triton: started only when the config names no Triton URL."""
