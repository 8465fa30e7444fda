"""The web view: a page, a REST API, WebRTC and MJPEG video of the annotated cameras."""

from streamer.web.errors import WebSecurityError
from streamer.web.server import WebServer

__all__ = ["WebSecurityError", "WebServer"]
