"""The web view: the live view, the events page and the login page, a REST API described in
OpenAPI, WebRTC and MJPEG video of the annotated cameras."""

from streamer.web.errors import WebSecurityError
from streamer.web.server import WebServer

__all__ = ["WebSecurityError", "WebServer"]
