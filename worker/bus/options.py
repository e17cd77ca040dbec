"""nats.connect() arguments from the settings: credentials and TLS, checked before any run.

Imports no NATS client: a command that fails on a bad credentials file fails at once.
"""

from __future__ import annotations

import ssl
from typing import Any

from ..config import ConfigError, Settings
from ..files import UnusableFile, read_text

MAX_CREDENTIALS_BYTES = 64 << 10


def connect_options(settings: Settings) -> dict[str, Any]:
    """nats.connect() arguments for the settings' credentials and TLS.

    Raises ConfigError naming the setting when a file it names cannot be used;
    no secret is ever part of a message.
    """
    options: dict[str, Any] = {}
    if settings.user is not None:
        options["user"] = settings.user
        options["password"] = settings.password or ""
    if settings.token is not None:
        options["token"] = settings.token
    for field, argument in (("nkey_seed", "nkeys_seed"), ("creds", "user_credentials")):
        path = getattr(settings, field)
        if path is not None:
            _check_readable(field, path)
            options[argument] = path
    if settings.tls_ca or settings.tls_cert:
        # Each file is blamed on its own setting: a CA that exists but is not PEM is tls_ca's.
        try:
            context = ssl.create_default_context(cafile=settings.tls_ca)
        except (OSError, ssl.SSLError) as exc:
            raise _tls_error("tls_ca", exc) from None
        if settings.tls_cert:
            try:
                context.load_cert_chain(settings.tls_cert, settings.tls_key)
            except (OSError, ssl.SSLError) as exc:
                raise _tls_error("tls_cert/tls_key", exc) from None
        options["tls"] = context
    return options


def _tls_error(which: str, exc: OSError) -> ConfigError:
    return ConfigError(
        f"{which}: cannot load the TLS files ({getattr(exc, 'strerror', None) or exc}); "
        "check the paths and that they are PEM"
    )


def _check_readable(field: str, path: str) -> None:
    """A credentials file the client can read when it connects: a regular file of UTF-8 text
    (a seed is 58 bytes, a creds file with its JWT a few KiB)."""
    try:
        read_text(path, MAX_CREDENTIALS_BYTES)
    except UnusableFile as exc:
        raise ConfigError(f"{field}: {path} {exc}; check the path and its permissions") from None
