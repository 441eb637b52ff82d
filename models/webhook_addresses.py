"""Which webhook addresses may be called: http(s) URLs whose host resolves only to public addresses, unless the
operator allows private ones (PLIMSOLL_WEBHOOKS_ALLOW_PRIVATE). Checked when an endpoint is registered and again at
every send, on the addresses the connection then uses (worker/webhook_http.py), so a name that resolves to a public
address at registration and to 127.0.0.1 later (DNS rebinding) is refused at the send."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

MAX_URL_CHARS = 2000


class AddressRefused(ValueError):
    """The URL is malformed, or its host is on a network webhooks may not reach."""


IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def refused_address(address: IpAddress) -> str | None:
    """Why ``address`` may not be called without the operator's leave (None: it is public)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return refused_address(address.ipv4_mapped)
    for reason, applies in (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("private", address.is_private),
        ("multicast", address.is_multicast),
        ("unspecified", address.is_unspecified),
        ("reserved", address.is_reserved or not address.is_global),
    ):
        if applies:
            return reason
    return None


def split_url(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a webhook URL, or AddressRefused saying what is wrong with it."""
    if len(url) > MAX_URL_CHARS:
        raise AddressRefused(f"the URL is longer than {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise AddressRefused(f"not a valid URL: {error}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AddressRefused("the URL must be http:// or https:// with a host")
    if parts.username or parts.password:
        raise AddressRefused("the URL may not carry a user name or password")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def resolve(host: str, port: int) -> list[IpAddress]:
    """Every address ``host`` resolves to now (an address literal is itself)."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise AddressRefused(f"the host {host!r} does not resolve ({error})") from None
    return list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in found))


def checked_addresses(host: str, port: int, *, allow_private: bool) -> list[IpAddress]:
    """The addresses ``host`` resolves to, all of them allowed, or AddressRefused."""
    addresses = resolve(host, port)
    if not allow_private:
        for address in addresses:
            reason = refused_address(address)
            if reason is not None:
                raise AddressRefused(
                    f"{host} resolves to {address}, a {reason} address: webhooks may not call it unless the "
                    "operator allows private addresses (PLIMSOLL_WEBHOOKS_ALLOW_PRIVATE=true)"
                )
    return addresses


def check_url(url: str, *, allow_private: bool) -> None:
    """AddressRefused unless ``url`` is a webhook address that may be called now."""
    _, host, port = split_url(url)
    checked_addresses(host, port, allow_private=allow_private)
