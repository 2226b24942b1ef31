"""A deadline for a request's headers: a client that trickles them, or sends none, is cut off.

uvicorn bounds the idle time between two requests of a connection (``timeout_keep_alive``)
but not the time a request takes to send its headers: a connection that sends
``GET / HTTP/1.1\\r\\n`` and then one byte a minute holds a socket and a protocol object
forever (slowloris; 200 such connections were never closed). ASGI cannot help, the app is
called only once the headers are complete.

:func:`header_deadline` wraps uvicorn's HTTP protocol (composition, not a subclass of its
private classes): its own streaming parser (httptools, public API) follows the same bytes
and arms a timer when a connection opens and when a request begins, cancels it when that
request's headers are complete, and closes the transport when it fires. It also bounds their
size (431 past 64 KiB). The body has its own deadline and limit, in ASGI (``ira.runtime.body``).
The inner protocol writes through :class:`OneWriteTransport`, so a response's head and body
leave in one system call.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any, ClassVar, cast

import httptools
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from ira.runtime.http_errors import error_entry, json_body

log = logging.getLogger(__name__)

DEFAULT_HEADER_TIMEOUT = timedelta(seconds=10)
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
"""Request line and headers together; uvicorn's httptools protocol has no bound of its own, so
a fast client could stream one endless header into memory within the deadline."""
_TOO_LARGE_BODY = json_body({"errors": [error_entry("headers_too_large", "the request headers are over 64 KiB")]})
_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
              b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_TOO_LARGE_BODY), _TOO_LARGE_BODY))


class HeaderDeadlineProtocol(asyncio.Protocol):
    """uvicorn's protocol for one connection, closed when a request's headers take too long."""

    timeout: ClassVar[float] = DEFAULT_HEADER_TIMEOUT.total_seconds()
    max_header_bytes: ClassVar[int] = DEFAULT_MAX_HEADER_BYTES
    inner_class: ClassVar[Any] = AutoHTTPProtocol

    def __init__(self, **options: Any) -> None:
        self._inner: asyncio.Protocol = self.inner_class(**options)
        self._parser: Any = httptools.HttpRequestParser(self)
        self._timer: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None
        self._in_headers, self._header_bytes = True, 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._arm()
        self._inner.connection_made(cast("asyncio.Transport", OneWriteTransport(transport)))

    def data_received(self, data: bytes) -> None:
        if self._parser is not None:
            if self._in_headers:
                self._header_bytes += len(data)
            try:
                self._parser.feed_data(data)
            except (httptools.HttpParserError, httptools.HttpParserUpgrade):
                self._parser = None  # the inner protocol answers 400 (or upgrades); stop following
                self._disarm()
            if self._in_headers and self._header_bytes > self.max_header_bytes:
                self._refuse_headers()
                return
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    # httptools callbacks: one request's headers begin, and end
    def on_message_begin(self) -> None:
        self._in_headers, self._header_bytes = True, 0
        self._arm()

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._disarm()

    def _refuse_headers(self) -> None:
        self._disarm()
        self._parser = None
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(_TOO_LARGE)
            self._transport.close()

    def _arm(self) -> None:
        self._disarm()
        self._timer = asyncio.get_running_loop().call_later(self.timeout, self._expire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if self._transport is not None and not self._transport.is_closing():
            log.info("closing a connection whose request headers took over %ss", self.timeout)
            self._transport.close()


class OneWriteTransport:
    """The connection's transport as uvicorn's protocol sees it: a response's head is held until
    its body follows, so a response costs one ``send`` instead of two.

    uvicorn writes the status line and headers on ``http.response.start`` and the body on
    ``http.response.body``: two system calls per response on a socket where each wakes the
    client, about as much CPU as the rest of a webhook's answer. A held head goes out with the
    next write, or at the end of the event loop's iteration (a streamed response's head is not
    delayed any longer), and before ``close``; every write still goes out in order.
    """

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport, self._held = transport, b""
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held:
            data, self._held = self._held + data, b""
        elif bytes(data[:5]) == b"HTTP/" and bytes(data[-4:]) == b"\r\n\r\n":  # a head: its body comes next
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
            return
        self._transport.write(data)

    def flush(self) -> None:
        if self._held:
            held, self._held = self._held, b""
            if not self._transport.is_closing():
                self._transport.write(held)

    def writelines(self, lines: Any) -> None:
        self.flush()
        self._transport.writelines(lines)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = b""
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def header_deadline(timeout: timedelta = DEFAULT_HEADER_TIMEOUT) -> type[asyncio.Protocol]:
    """The protocol class to give ``uvicorn.Config(http=...)``: its protocol behind ``timeout``
    (and at most ``DEFAULT_MAX_HEADER_BYTES`` of request line and headers, else 431)."""
    return type("HeaderDeadlineProtocol", (HeaderDeadlineProtocol,), {"timeout": timeout.total_seconds()})
