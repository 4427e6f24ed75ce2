"""How NCCL, gloo and gRPC read their environment: interface names and proxies.

Pure functions of variable values; each states the library's rule, not slurmenv's.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

GRPC_PROXIES = ("grpc_proxy", "https_proxy", "http_proxy")  # gRPC's order (lowercase only)
GRPC_NO_PROXIES = ("no_grpc_proxy", "no_proxy")
OTHER_PROXIES = ("HTTPS_PROXY", "HTTP_PROXY")
ALL_PROXIES = GRPC_PROXIES + OTHER_PROXIES


def nccl_allows(value: str, interface: str) -> bool:
    """Whether ``NCCL_SOCKET_IFNAME=value`` lets NCCL use ``interface``: a comma list of
    prefixes, excluded after a leading ``^``, exact names after a leading ``=``."""
    text = value.strip()
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    names = [part.strip().split(":")[0] for part in text.split(",") if part.strip()]
    match = any(interface == n if exact else interface.startswith(n) for n in names)
    return not match if exclude else match


def gloo_allows(value: str, interface: str) -> bool:
    """Whether ``GLOO_SOCKET_IFNAME=value`` (exact names, comma-separated) includes it."""
    return interface in [part.strip() for part in value.split(",")]


def socket_ifname(name: str, interfaces: Mapping[str, object]) -> dict[str, str]:
    """``NCCL_SOCKET_IFNAME`` and ``GLOO_SOCKET_IFNAME`` that select exactly ``name`` (NCCL's
    ``=name`` when another interface starts with it: NCCL takes prefixes)."""
    exact = any(other != name and other.startswith(name) for other in interfaces)
    return {"NCCL_SOCKET_IFNAME": f"={name}" if exact else name, "GLOO_SOCKET_IFNAME": name}


def _entry_covers(entry: str, host: str) -> bool:
    """gRPC's no_proxy rule: the host ends with the entry, or it is an IP in the CIDR entry."""
    if host.lower().endswith(entry.lower()):
        return True
    if "/" not in entry:
        return False
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False


def grpc_proxy(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """``(variable, value)`` of the proxy gRPC core would use: the first of grpc_proxy,
    https_proxy, http_proxy set wins; empty means none; gRPC ignores a scheme but ``http://``."""
    for name in GRPC_PROXIES:
        value = environ.get(name)
        if value is None:
            continue
        if not value.strip() or not value.strip().lower().startswith("http://"):
            return None
        return name, value
    return None


def grpc_exempt(environ: Mapping[str, str], host: str) -> bool:
    """Whether gRPC connects to ``host`` directly despite a proxy (no_grpc_proxy, no_proxy)."""
    for name in GRPC_NO_PROXIES:
        value = environ.get(name)
        if value is None:
            continue
        entries = [e.strip() for e in value.split(",") if e.strip()]
        return any(_entry_covers(e, host) for e in entries)
    return False


def is_loopback(address: str) -> bool:
    """Whether ``address`` is a loopback IP (a name is not)."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
