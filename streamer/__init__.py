"""lpr-streamer: real-time licence-plate stream processor on NVIDIA Triton."""

import importlib.metadata

try:
    #: The installed package's version (the User-Agent of webhooks, the API's /api/info).
    __version__ = importlib.metadata.version("lpr-streamer")
except importlib.metadata.PackageNotFoundError:  # run from a tree that is not installed
    __version__ = "0+unknown"
