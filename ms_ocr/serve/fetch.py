"""Fetching http(s) image URLs for the server without letting a client reach what the server can reach.

Off unless the operator names the hosts (--allowed-media-domains, as vLLM's option). An allowed host's name is
resolved here and the connection goes to an address that was checked: loopback, private, link-local, shared,
reserved and multicast addresses are refused (unless --allow-private-media-addresses), and since the socket is
opened to the checked address itself, a second DNS answer (rebinding) cannot move it. Redirects are followed
(at most MAX_REDIRECTS) under the same checks. One deadline bounds the whole fetch (connect, redirects, every
byte: a source that trickles a byte every few seconds is cut at the deadline) and the body is read up to the
image byte limit. Errors name the host and what went wrong in general terms, never the network's own text
("Connection refused" against "timed out" would let a client map ports).
"""

import http.client
import ipaddress
import socket
import ssl
import time
import urllib.parse

MAX_REDIRECTS = 3
_REDIRECTS = (301, 302, 303, 307, 308)
_CHUNK = 1 << 16


class FetchError(ValueError):
    """A remote image that was not fetched (the message is safe to send to the client)."""


def address_allowed(ip, allow_private=False):
    """True for an address the server may connect to: a global unicast address (an IPv4-mapped IPv6 address is
    judged as its IPv4 address), or any address with allow_private."""
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if allow_private:
        return not addr.is_multicast and not addr.is_unspecified
    return addr.is_global and not addr.is_multicast


def host_allowed(host, allowed_domains):
    """`host` is named in allowed_domains (exact, case-insensitive), or allowed_domains holds "*"."""
    host = (host or "").lower().rstrip(".")
    return bool(host) and ("*" in allowed_domains or host in {d.lower().rstrip(".") for d in allowed_domains})


def _remaining(deadline, host, timeout):
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchError(f"could not fetch the image from {host}: no answer within {timeout:g} s")
    return left


def _open_socket(host, port, deadline, timeout, allow_private):
    """A TCP socket to the first checked address of `host` (the one DNS look-up this fetch makes)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise FetchError(f"could not fetch the image from {host}: the host name does not resolve") from None
    usable = [info for info in infos if address_allowed(info[4][0], allow_private)]
    if not usable:
        raise FetchError(f"image URLs may not name {host}: it is not a public internet address")
    for family, kind, proto, _, addr in usable:
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(_remaining(deadline, host, timeout))
            sock.connect(addr)
            return sock
        except FetchError:
            sock.close()
            raise
        except OSError:
            sock.close()
    raise FetchError(f"could not fetch the image from {host}: the connection failed")


def _connection(parts, deadline, timeout, allow_private):
    host, https = parts.hostname, parts.scheme == "https"
    port = parts.port or (443 if https else 80)

    class Checked(http.client.HTTPSConnection if https else http.client.HTTPConnection):
        def connect(self):
            sock = _open_socket(host, port, deadline, timeout, allow_private)
            self.sock = self._context.wrap_socket(sock, server_hostname=host) if https else sock
            self.live = self.sock  # getresponse() drops conn.sock on "Connection: close"; the body reads on

    if https:
        return Checked(host, port, context=ssl.create_default_context())
    return Checked(host, port)


def fetch(url, limits):
    """The bytes of an http(s) image URL under `limits` (MediaLimits), or FetchError."""
    deadline = time.monotonic() + limits.fetch_timeout
    for _ in range(MAX_REDIRECTS + 1):
        try:
            parts = urllib.parse.urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError:
            raise FetchError("the image URL is not a valid URL") from None
        host = parts.hostname or ""
        if parts.scheme not in ("http", "https"):
            raise FetchError("an image URL redirected to a scheme other than http(s)")
        if not limits.allowed_domains:
            raise FetchError("this server does not fetch http(s) image URLs (its operator can allow hosts with "
                             "--allowed-media-domains); send the image as a data: URL")
        if not host_allowed(host, limits.allowed_domains):
            raise FetchError(f"image URLs from {host or 'that host'} are not allowed on this server "
                             "(--allowed-media-domains)")
        conn = _connection(parts, deadline, limits.fetch_timeout, limits.allow_private)
        try:
            target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
            conn.request("GET", target, headers={"User-Agent": "ms_ocr", "Accept": "image/*", "Connection": "close"})
            conn.live.settimeout(_remaining(deadline, host, limits.fetch_timeout))
            resp = conn.getresponse()
            if resp.status in _REDIRECTS and resp.getheader("Location"):
                url = urllib.parse.urljoin(url, resp.getheader("Location"))
                continue
            if resp.status != 200:
                raise FetchError(f"could not fetch the image from {host}: HTTP status {resp.status}")
            size = resp.getheader("Content-Length")
            if size is not None and size.isdigit() and int(size) > limits.max_bytes:
                raise FetchError(f"the image at {host} is larger than {limits.max_bytes} bytes")
            return _read_body(conn, resp, deadline, host, limits)
        except FetchError:
            raise
        except (socket.timeout, TimeoutError):
            raise FetchError(f"could not fetch the image from {host}: no answer within "
                             f"{limits.fetch_timeout:g} s") from None
        except (OSError, http.client.HTTPException, ValueError):
            raise FetchError(f"could not fetch the image from {host}: the connection failed") from None
        finally:
            conn.close()
    raise FetchError(f"the image URL redirected more than {MAX_REDIRECTS} times")


def _read_body(conn, resp, deadline, host, limits):
    data = bytearray()
    while True:
        conn.live.settimeout(_remaining(deadline, host, limits.fetch_timeout))
        chunk = resp.read1(_CHUNK)
        if not chunk:
            return bytes(data)
        data += chunk
        if len(data) > limits.max_bytes:
            raise FetchError(f"the image at {host} is larger than {limits.max_bytes} bytes")
