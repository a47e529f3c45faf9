"""Connections a client cannot use to take the server down: a cap on open connections, a deadline for a request's
headers, and accept errors logged once.

uvicorn's HTTP protocol has no header-read timeout and no connection cap (its limit_concurrency still accepts and
parses each request first): 260 sockets that sent half a request line and went quiet made /health time out under
`ulimit -n 256`, and each failed accept() logged a traceback (308 MB of log in a minute). Here:
- a connection whose request headers have not all arrived within `header_timeout` seconds is closed (the first
  request's and each later keep-alive request's: the clock starts with the connection, and again with the first
  bytes after a response);
- at most `max_connections` are open; at the cap, a new connection first evicts the oldest connection still
  waiting for its headers (an idle or trickling one), so a request that really arrives, /health included, gets
  in; when every open connection is busy with a request, the new one is answered 503 and closed;
- the process's soft descriptor limit is raised to its hard limit, and the cap kept below it (DESCRIPTORS_KEPT
  for model files, fetches and logs), so accept() does not run out of descriptors in the first place; if it does
  anyway, one line says so (and how many times it happened when it stops), not a traceback per attempt.
"""

import asyncio
import logging
import resource
import time

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("ms_ocr.serve")

DESCRIPTORS_KEPT = 64  # descriptors left for everything but client connections
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
         b"content-length: %d\r\n\r\n%s")
_BUSY_BODY = (b'{"error": {"message": "the server has too many open connections; retry later", '
              b'"type": "ServiceUnavailableError", "param": null, "code": 503}}')


def raise_descriptor_limit():
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def connection_cap(requested=None):
    """The connection cap: `requested` (--max-connections), kept DESCRIPTORS_KEPT below the descriptor limit."""
    room = max(8, raise_descriptor_limit() - DESCRIPTORS_KEPT)
    return room if requested is None else min(requested, room)


class AcceptErrors:
    """An event-loop exception handler that reports accept() failures (out of descriptors) in one line, again
    only after `quiet` seconds with how many happened meanwhile; everything else goes to the previous handler."""

    def __init__(self, previous=None, quiet=60.0):
        self.previous, self.quiet, self.last, self.missed = previous, quiet, None, 0

    def __call__(self, loop, context):
        if "accept" not in str(context.get("message", "")):
            if self.previous is not None:
                return self.previous(loop, context)
            return loop.default_exception_handler(context)
        now = time.monotonic()
        if self.last is not None and now - self.last < self.quiet:
            self.missed += 1
            return None
        more = f" ({self.missed} more since the last report)" if self.missed else ""
        exc = context.get("exception")
        log.error("ms_ocr: cannot accept connections: %s%s; new clients wait (raise `ulimit -n` or lower "
                  "--max-connections)", exc or context.get("message"), more)
        self.last, self.missed = now, 0
        return None


def install_accept_errors(loop=None):
    loop = loop or asyncio.get_running_loop()
    if not isinstance(loop.get_exception_handler(), AcceptErrors):
        loop.set_exception_handler(AcceptErrors(loop.get_exception_handler()))


def guarded_protocol(max_connections, header_timeout):
    """uvicorn's h11 protocol class with the connection cap and the header deadline (pass it as Config(http=...))."""

    class Guarded(H11Protocol):
        def connection_made(self, transport):
            self._refused, self._deadline, self._since = False, None, time.monotonic()
            if len(self.connections) >= max_connections and not self._evict_idle():
                self._refused = True
                transport.write(_BUSY % (len(_BUSY_BODY), _BUSY_BODY))
                transport.close()
                return
            super().connection_made(transport)
            self._cycle_seen = self.cycle
            self._arm()

        def _waiting_for_headers(self):
            """No request is being answered on this connection (none yet, or the last one is done)."""
            return self.cycle is None or self.cycle.response_complete

        def _evict_idle(self):
            idle = [c for c in self.connections if isinstance(c, Guarded) and c._waiting_for_headers()]
            if not idle:
                return False
            oldest = min(idle, key=lambda c: c._since)
            oldest.transport.close()
            self.connections.discard(oldest)
            return True

        def _arm(self):
            self._disarm()
            self._since = time.monotonic()
            self._deadline = self.loop.call_later(header_timeout, self._headers_late)

        def _disarm(self):
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _headers_late(self):
            self._deadline = None
            if self.cycle is self._cycle_seen and not self.transport.is_closing():
                self.transport.close()  # its headers never came: nothing was asked, nothing to answer

        def data_received(self, data):
            if self._deadline is None and self._waiting_for_headers():
                self._cycle_seen = self.cycle
                self._arm()  # a new request starts arriving: its headers get the deadline
            super().data_received(data)
            if self.cycle is not self._cycle_seen:
                self._cycle_seen = self.cycle
                self._disarm()  # its headers are in: the app bounds the body (protocol.read_body)

        def on_response_complete(self):
            super().on_response_complete()
            self._cycle_seen = self.cycle  # keep-alive: uvicorn's own timeout closes a quiet connection

        def connection_lost(self, exc):
            if self._refused:
                return
            self._disarm()
            super().connection_lost(exc)

    return Guarded
