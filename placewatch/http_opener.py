"""The one HTTP opener placewatch uses: urllib's, following no redirect.

A health URL (the worker) and a webhook (`placewatch alerts`) are each asked exactly what
was configured: a 3xx is the answer, raised as urllib's HTTPError, never followed (urllib
would turn a redirected POST into a GET, and a node-local URL whose query holds a token
would go to another host). One HTTP request at a time needs no client dependency.
"""

from __future__ import annotations

import functools
import urllib.request
from typing import Any


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


@functools.cache
def opener(*, proxies: bool) -> urllib.request.OpenerDirector:
    """urllib's opener without redirects; with `proxies`, those the environment names (a
    webhook may be reached through one), else none (a node-local health URL)."""
    if proxies:
        return urllib.request.build_opener(_NoRedirect)
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect)
