"""The web view: a page, a REST API, WebRTC and MJPEG video of the annotated cameras."""

from streamer.web.server import WebSecurityError, WebServer

__all__ = ["WebSecurityError", "WebServer"]
