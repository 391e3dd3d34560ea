"""Subject names that contain ``/`` (``common/address.proto``: the default subject of a Protobuf import
that Confluent's serializers register). Clients send the slash URL-encoded (``%2F``); the ASGI server
decodes it before routing, and the route would no longer match. :class:`SlashedSubjects` keeps an encoded
slash as a placeholder in the routed path, and :class:`SubjectRoute` turns it back into ``/`` in the path
parameters.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["SlashedSubjects", "SubjectRoute"]

_PLACEHOLDER = "\x1f"


class SlashedSubjects:
    """ASGI middleware: a ``%2F`` in the raw path stays one path segment."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if raw and b"%2f" in raw.lower():
            text = raw.decode("latin-1").replace("%2F", _PLACEHOLDER).replace("%2f", _PLACEHOLDER)
            scope = {**scope, "path": unquote(text)}
        await self.app(scope, receive, send)


class SubjectRoute(APIRoute):
    """A route whose path parameters get their encoded slashes back."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        params: dict[str, Any] | None = child.get("path_params")
        if params:
            for key, value in params.items():
                if isinstance(value, str) and _PLACEHOLDER in value:
                    params[key] = value.replace(_PLACEHOLDER, "/")
        return match, child
