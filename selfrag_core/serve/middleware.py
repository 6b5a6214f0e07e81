"""Checks made before routing (the bearer token, the body size, UTF-8 JSON) and the last
resort for unhandled errors (a JSON 500, never a stack trace). A plain ASGI middleware, so
a refused request is never parsed: an oversized body is cut off at the limit (413).
"""

from __future__ import annotations

import hmac
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from selfrag_core.serve.errors import INTERNAL_ERROR, error_response
from selfrag_core.serve.settings import TOKEN_ENV, ServeSettings, is_loopback

logger = logging.getLogger("selfrag.serve")

_BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
#: the paths that need no bearer token
PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})


def _header(scope: Scope, name: bytes) -> bytes | None:
    return next((bytes(value) for key, value in scope.get("headers", ()) if key.lower() == name), None)


class GuardMiddleware:
    def __init__(self, app: ASGIApp, *, settings: ServeSettings) -> None:
        self.app = app
        # compared as bytes, as the header arrives (settings refuse non-ASCII tokens)
        self.token = None if settings.api_token is None else settings.api_token.encode()
        self.warned_open = False
        self.max_body_bytes = settings.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem = self._check_token(scope) or self._check_length(scope)
        if problem is None and scope["method"] in _BODY_METHODS:
            receive, problem = await self._read_body(scope, receive)
        if problem is not None:
            await problem(scope, receive, send)
            return
        await self._call_app(scope, receive, send)

    async def _call_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app, with any unhandled error answered as a JSON 500 (details go to the log
        only) and kept from the server, so the connection stays usable."""
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as e:
            logger.error("unhandled error: %s: %s", type(e).__name__, e, exc_info=e)
            if not started:
                await error_response(500, INTERNAL_ERROR)(scope, receive, send)

    def _check_token(self, scope: Scope) -> ASGIApp | None:
        if self.token is None:
            self._warn_open(scope)
            return None
        if scope["path"] in PUBLIC_PATHS or scope["method"] == "OPTIONS":
            return None
        auth = _header(scope, b"authorization") or b""
        scheme, _, given = auth.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token):
            return None
        message = "missing bearer token" if not auth else "invalid bearer token"
        return error_response(
            401, f"{message}: send 'Authorization: Bearer <token>'", headers={"WWW-Authenticate": "Bearer"}
        )

    def _warn_open(self, scope: Scope) -> None:
        """Once per app, when a request from another host reaches it without a token, say
        that the app is open, so an open service is never silent (loopback stays quiet)."""
        client = scope.get("client")
        if self.warned_open or not client or is_loopback(str(client[0])):
            return
        self.warned_open = True
        logger.warning(
            "no bearer token: a request from %s was let in, as is any request from anyone who can reach "
            "this server (queries, ingestion, deletion); set %s or ServeSettings(api_token=...)",
            client[0], TOKEN_ENV,
        )  # fmt: skip

    def _check_length(self, scope: Scope) -> ASGIApp | None:
        raw = _header(scope, b"content-length")
        if raw is None:
            return None
        declared = raw.decode("latin-1")
        digits = declared.strip()
        if not (digits.isascii() and digits.isdigit()):  # "²".isdigit(), but int("²") fails
            return error_response(400, f"invalid Content-Length {declared!r}")
        return self._too_large() if int(digits) > self.max_body_bytes else None

    def _too_large(self) -> ASGIApp:
        return error_response(
            413, f"request body is larger than {self.max_body_bytes:,} bytes; send less per request"
        )

    async def _read_body(self, scope: Scope, receive: Receive) -> tuple[Receive, ASGIApp | None]:
        """A receive channel replaying the body once read, then the real one; or a refusal."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return receive, self._too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if b"json" in (_header(scope, b"content-type") or b"").lower():
            try:
                body.decode("utf-8")
            except UnicodeDecodeError as e:
                return receive, error_response(
                    400, f"request body is not valid UTF-8 (byte {e.start}); send JSON encoded as UTF-8"
                )
        pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay() -> Message:
            return pending.pop() if pending else await receive()

        return replay, None
