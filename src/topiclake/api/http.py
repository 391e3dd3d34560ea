"""Request plumbing shared by the routes: bounded body reading and content negotiation."""

from __future__ import annotations

from fastapi import Request
from starlette.requests import ClientDisconnect
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from topiclake.api.errors import HTTPError


def media_type(request: Request) -> str:
    """The request's Content-Type without parameters, lower-cased ('' when absent)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def require_media(request: Request, allowed: tuple[str, ...]) -> str:
    """Return the request's media type if allowed, else raise 415 naming the accepted ones."""
    mt = media_type(request)
    if mt not in allowed:
        raise HTTPError(
            415,
            415,
            f"unsupported Content-Type {mt or '(none)'!r}; send one of: {', '.join(allowed)}",
            code="unsupported_media_type",
        )
    return mt


def accepted(request: Request) -> list[str]:
    """The media types the ``Accept`` header asks for, best first (q > 0, stable for equal q)."""
    accept = request.headers.get("accept", "").strip()
    wanted: list[tuple[float, int, str]] = []
    for i, part in enumerate(accept.split(",") if accept else ()):
        fields = part.strip().split(";")
        mt = fields[0].strip().lower()
        q = 1.0
        for f in fields[1:]:
            name, _, value = f.strip().partition("=")
            if name == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if q > 0 and mt:
            wanted.append((-q, i, mt))
    return [mt for _q, _i, mt in sorted(wanted)]


def negotiate(request: Request, offered: tuple[str, ...]) -> str:
    """Pick the response media type from the Accept header (first offered when Accept is absent or */*).

    Raises:
        HTTPError: 406 when nothing offered is acceptable.
    """
    if not request.headers.get("accept", "").strip():
        return offered[0]
    for mt in accepted(request):
        if mt in ("*/*", "application/*"):
            return offered[0]
        if mt in offered:
            return mt
    raise HTTPError(
        406,
        40601,
        f"cannot answer with {request.headers.get('accept')!r}; acceptable: {', '.join(offered)}",
        code="not_acceptable",
    )


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refusing (413) more than ``limit`` bytes before reading them all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPError(
            413, 41301, f"request body of {declared} bytes exceeds the limit of {limit}", "too_large"
        )
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPError(413, 41301, f"request body exceeds the limit of {limit} bytes", "too_large")
        chunks.append(chunk)
    return b"".join(chunks)


class DuplexStreamingResponse(StreamingResponse):
    """A streaming response that may read the request body while it streams.

    Starlette's ``StreamingResponse`` watches for a client disconnect by consuming ``receive()``, which
    would swallow the chunks of a request body still being read (full-duplex produce streams). This one only
    sends; a client that goes away makes ``send`` fail, which ends the stream.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.stream_response(send)
        except OSError as exc:  # the client went away
            raise ClientDisconnect() from exc
        if self.background is not None:
            await self.background()
