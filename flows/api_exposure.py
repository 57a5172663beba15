"""Whether the Prefect API a process talks to lets strangers in: ``grace serve`` warns when the
server answers without a login from an address other machines can reach.

The rule (:func:`exposure_warning`): warn when the API answered an unauthenticated request
(:func:`answers_without_login`) and its URL's host is not a loopback address. The probe asks
``/admin/version``, not ``/health``: Prefect lets ``/health`` and ``/ready`` through without a
login even when the server has one (``PREFECT_SERVER_API_AUTH_STRING``), so only a guarded path
tells an open server from a closed one. The client's own ``PREFECT_API_AUTH_STRING`` does not
decide: a client that sends a login to a server without one is just as exposed, and only the
hint differs. The host is read as written, never resolved: ``localhost``, 127.0.0.0/8 and
``::1`` (also IPv4-mapped) are loopback; ``0.0.0.0``, a LAN address or any other name is not.
"""

from __future__ import annotations

import ipaddress
import urllib.error
import urllib.request
from urllib.parse import urlsplit

PROBE_PATH = "/admin/version"
PROBE_TIMEOUT_S = 5.0


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (a URL's host, brackets stripped) names this machine's loopback
    interface: ``localhost`` or a loopback IP address (127.0.0.0/8, ``::1``, ``::ffff:127.x.y.z``)."""
    if not host:
        return False
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def exposure_warning(api_url: str, open_without_login: bool | None, client_has_login: bool) -> str | None:
    """The one-line warning for a Prefect API at ``api_url`` that answered a request without a
    login (``open_without_login``: True answered, False refused with 401/403, None not known),
    or None when there is nothing to warn about: it refused, could not be asked, or listens on
    loopback only."""
    if open_without_login is not True or is_loopback(urlsplit(api_url).hostname):
        return None
    hint = ("its server ignores the PREFECT_API_AUTH_STRING this process sends" if client_has_login
            else "PREFECT_API_AUTH_STRING is not set")
    return (f"warning: the Prefect API at {api_url} answers without a login ({hint}): anyone who reaches it can run, "
            "pause and resume flows; start the server with PREFECT_SERVER_API_AUTH_STRING='user:password' "
            "and give clients PREFECT_API_AUTH_STRING (docs/pipeline.md)")


def answers_without_login(api_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool | None:
    """Whether the Prefect API at ``api_url`` answers ``GET /admin/version`` sent without
    credentials: True (2xx), False (401 or 403), None (no answer, or another status)."""
    request = urllib.request.Request(api_url.rstrip("/") + PROBE_PATH, method="GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return 200 <= response.status < 300
    except urllib.error.HTTPError as err:
        return False if err.code in (401, 403) else None
    except (OSError, ValueError):
        return None
