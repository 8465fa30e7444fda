"""``GET /api/openapi.json``: the API described in OpenAPI 3.1.

The schemas are generated (openapi-pydantic, from pydantic's JSON Schema) from the models in
streamer/web/api_models.py, the ones every JSON answer is dumped through; this module only
lists the routes, their parameters (with the patterns and bounds the handlers check) and
which model each answers with. Every refusal is a :class:`~streamer.web.api_models.Problem`
(``default``).
"""

from __future__ import annotations

import functools
from typing import Any

from openapi_pydantic import (
    Components,
    MediaType,
    OpenAPI,
    Operation,
    Parameter,
    PathItem,
    RequestBody,
    Response,
    Schema,
    SecurityScheme,
)
from openapi_pydantic import Info as DocumentInfo
from openapi_pydantic.util import PydanticSchema, construct_open_api_with_schema_class

from streamer.config import CAMERA_NAME_PATTERN
from streamer.store.base import MAX_LIMIT
from streamer.web import api_models as m
from streamer.web.errors import PROBLEM
from streamer.web.history import EVENT_ID_PATTERN, NAME_PATTERN, PLATE_PATTERN

_SECURITY = [{"bearer": []}, {"session": []}, {"query_token": []}]


def _ref(model: type[m.Model]) -> PydanticSchema[Any]:
    return PydanticSchema(schema_class=model)


def _json(model: type[m.Model] | Schema, description: str = "OK") -> Response:
    schema = _ref(model) if isinstance(model, type) else model
    return Response(description=description, content={"application/json": MediaType(schema=schema)})


def _binary(kind: str, description: str) -> Response:
    return Response(
        description=description, content={kind: MediaType(schema=Schema(type="string"))}
    )


_PROBLEM = Response(description="A refusal", content={PROBLEM: MediaType(schema=_ref(m.Problem))})


def _op(summary: str, ok: dict[str, Response], *, public: bool = False, **more: Any) -> Operation:
    return Operation(
        summary=summary,
        responses={**ok, "default": _PROBLEM},
        security=[] if public else None,
        **more,
    )


def _param(name: str, where: str, schema: Schema, description: str) -> Parameter:
    return Parameter(
        name=name,
        param_in=where,
        required=where == "path",
        param_schema=schema,
        description=description,
    )


def _string(pattern: str) -> Schema:
    return Schema(type="string", pattern=pattern)


_BOOL = Schema(type="boolean")
_TIME = Schema(type="string", description="ISO 8601 (a time without a zone is UTC) or Unix s")
_SEARCH = [
    _param("plate", "query", _string(PLATE_PATTERN), "The plate text (exact by default)."),
    _param("prefix", "query", _BOOL, "The plate's start."),
    _param("fuzzy", "query", _BOOL, "Within one edit of the plate."),
    _param("camera", "query", _string(NAME_PATTERN), "The camera."),
    _param("after", "query", _TIME, "First seen at or after."),
    _param("before", "query", _TIME, "First seen before."),
    _param("label", "query", _string(NAME_PATTERN), "The known-plate list matched."),
    _param("alert", "query", _BOOL, "Only alerts (true), or none (false)."),
    _param(
        "withheld",
        "query",
        Schema(type="string", enum=["true", "false", "any"]),
        "The reported passes (false, the default), the withheld ones (true), or both (any).",
    ),
]
_EVENT_ID = _param("event_id", "path", _string(EVENT_ID_PATTERN), "The event (message) id.")
_CAMERA = _param("name", "path", _string(CAMERA_NAME_PATTERN.replace("\\Z", "$")), "Camera")
_LINK = [
    _param("expires", "query", _string(r"^[0-9]{1,12}$"), "A signed link's expiry."),
    _param("sig", "query", Schema(type="string"), "A signed link's signature."),
]


def _paths() -> dict[str, PathItem]:
    page = {"200": _binary("text/html", "The page")}
    return {
        "/": PathItem(get=_op("The live view", page)),
        "/events": PathItem(get=_op("The events page", page)),
        "/login": PathItem(get=_op("The login page", page, public=True)),
        "/api/openapi.json": PathItem(
            get=_op("This document", {"200": _json(Schema(type="object"))})
        ),
        "/api/info": PathItem(get=_op("What the pages need to know", {"200": _json(m.Info)})),
        "/api/webrtc": PathItem(
            get=_op(
                "STUN and TURN servers for the live view, and when it falls back to MJPEG",
                {"200": _json(m.WebRtcSettings)},
            )
        ),
        "/api/shards": PathItem(
            get=_op("This replica and which replica runs each camera", {"200": _json(m.Shards)})
        ),
        "/api/session": PathItem(
            get=_op(
                "Whether a login is needed, and whether this browser has one",
                {"200": _json(m.SessionState)},
                public=True,
            ),
            post=_op(
                "Log in: the token for an HttpOnly session cookie",
                {"204": Response(description="Logged in (Set-Cookie: lpr_session)")},
                public=True,
                requestBody=RequestBody(
                    required=True, content={"application/json": MediaType(schema=_ref(m.Login))}
                ),
            ),
            delete=_op("Log out", {"204": Response(description="Logged out")}),
        ),
        "/api/cameras": PathItem(
            get=_op(
                "Every camera's status",
                {"200": _json(Schema(type="array", items=_ref(m.Camera)))},
            )
        ),
        "/api/cameras/{name}": PathItem(
            get=_op("One camera's status", {"200": _json(m.Camera)}, parameters=[_CAMERA])
        ),
        "/api/cameras/{name}/snapshot.jpg": PathItem(
            get=_op(
                "The latest frame, annotated",
                {"200": _binary("image/jpeg", "JPEG")},
                parameters=[_CAMERA],
            )
        ),
        "/api/cameras/{name}/mjpeg": PathItem(
            get=_op(
                "Annotated video as MJPEG (endless)",
                {"200": _binary("multipart/x-mixed-replace", "MJPEG")},
                parameters=[_CAMERA],
            )
        ),
        "/api/cameras/{name}/webrtc": PathItem(
            post=_op(
                "WebRTC signalling: an SDP offer in, the answer out",
                {"200": _json(m.SessionDescription)},
                parameters=[_CAMERA],
                requestBody=RequestBody(
                    required=True,
                    content={"application/json": MediaType(schema=_ref(m.SessionDescription))},
                ),
            )
        ),
        "/api/events": PathItem(
            get=_op(
                "Search the history, newest first (without one: the recent events)",
                {"200": _json(m.EventPage)},
                parameters=[
                    *_SEARCH,
                    _param(
                        "limit", "query", Schema(type="integer", minimum=1, maximum=MAX_LIMIT), ""
                    ),
                    _param("cursor", "query", Schema(type="string"), "next_cursor of a page"),
                ],
            ),
            delete=_op(
                "Erase every trace of a plate",
                {"200": _json(m.Erased)},
                parameters=[
                    Parameter(
                        name="plate",
                        param_in="query",
                        required=True,
                        param_schema=_string(PLATE_PATTERN),
                    )
                ],
            ),
        ),
        "/api/events.csv": PathItem(
            get=_op(
                "The search as CSV, every page",
                {"200": _binary("text/csv", "CSV, one row per pass")},
                parameters=_SEARCH,
            )
        ),
        "/api/events/live": PathItem(
            get=_op(
                "New events as server-sent events (event: plate, data: an Event)",
                {"200": _binary("text/event-stream", "Endless")},
            )
        ),
        "/api/events/{event_id}": PathItem(
            get=_op(
                "One pass and its versions", {"200": _json(m.EventDetail)}, parameters=[_EVENT_ID]
            ),
            delete=_op("Erase one pass", {"200": _json(m.Erased)}, parameters=[_EVENT_ID]),
        ),
        "/api/events/{event_id}/crop.jpg": PathItem(
            get=_op(
                "The plate crop",
                {"200": _binary("image/jpeg", "JPEG")},
                parameters=[_EVENT_ID, *_LINK],
            )
        ),
        "/api/events/{event_id}/frame.jpg": PathItem(
            get=_op(
                "The vehicle around the plate",
                {"200": _binary("image/jpeg", "JPEG")},
                parameters=[_EVENT_ID, *_LINK],
            )
        ),
        "/api/reload": PathItem(
            post=_op("Read the config file again and apply it", {"200": _json(m.ReloadOutcome)})
        ),
    }


@functools.cache
def document(version: str) -> dict[str, Any]:
    """The OpenAPI document, as JSON-able data (made once: call it in a thread)."""
    base = OpenAPI(
        openapi="3.1.0",
        info=DocumentInfo(
            title="lpr-streamer",
            version=version,
            description="Licence-plate events, their history and the live view. See README.md.",
        ),
        paths=_paths(),
        components=Components(
            securitySchemes={
                "bearer": SecurityScheme(type="http", scheme="bearer"),
                "session": SecurityScheme(
                    type="apiKey", name="lpr_session", security_scheme_in="cookie"
                ),
                "query_token": SecurityScheme(
                    type="apiKey", name="token", security_scheme_in="query"
                ),
            }
        ),
        security=_SECURITY,
    )
    built = construct_open_api_with_schema_class(base)
    return built.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)
