"""Ollama's server, asked what it runs: `/api/ps` for each loaded model's size and the bytes of
it Ollama put in GPU memory, `/api/show` for the file each model was loaded from.

Read from Ollama's sources at fb30760996871fa9460115c753afd2c60d4ab0f7 (0.33.0-rc2):

- GET /api/ps (server/routes.go:2271-2303) answers `{"models": [{"name", "model", "size",
  "digest", "details", "expires_at", "size_vram", "context_length"}]}` (api/types.go:817-844),
  `size` and `size_vram` in bytes: `ollama ps` prints their ratio as "100% GPU". Its `digest`
  is the sha256 of the model's manifest (manifest/manifest.go), not of the model file, so it
  cannot tell which child runs which model.
- POST /api/show `{"model": name}` answers the model's `modelfile`, whose `FROM` line is the
  file it loads (server/images.go, Model.String): the `--model` its child was given.

Anyone on the node can run a process called `ollama serve`, so what it answers is hostile
input like any log: only a child's own parent is asked, on a loopback port that parent
listens on itself, by a deadline checked between reads, at most MAX_ANSWER bytes of an answer
read and decoded into small Structs. HTTP/1.0 is spoken on a plain socket so that the
deadline holds whatever the server sends (http.client's timeout is per read).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping

import msgspec
import psutil

from ..base import Launch, ModelClaim, Server
from . import ENGINE

MAX_ANSWER = 256 << 10
"""The most bytes of an answer read; /api/show with a model's licence runs to tens of KiB."""
MAX_NAME_BYTES = 96
"""The longest model name used in a shard's id (`ollama-11434/<name>`, 128 bytes at most)."""
MAX_SHOWN = 16
"""The most models one call asks /api/show about."""
MAX_NAMES = 256
"""Model files whose names are kept between calls."""
SOURCE = "Ollama's /api/ps"

_LOOPBACK = {"127.0.0.1": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::1": "::1", "::": "::1"}  # noqa: S104 - addresses read, not bound


class _Loaded(msgspec.Struct):
    name: str = ""
    size: int = 0
    size_vram: int = 0


class _Ps(msgspec.Struct):
    models: list[_Loaded] = msgspec.field(default_factory=list)


class _Show(msgspec.Struct):
    modelfile: str = ""


_ps = msgspec.json.Decoder(_Ps)
_show = msgspec.json.Decoder(_Show)


def address(pid: int) -> tuple[str, int] | None:
    """Where the process `pid` listens on loopback (or on every address): the lowest such port,
    as its own sockets say."""
    try:
        sockets = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    found = sorted(
        (c.laddr.port, _LOOPBACK.get(c.laddr.ip) or "127.0.0.1")
        for c in sockets
        if c.status == psutil.CONN_LISTEN
        and (c.laddr.ip in _LOOPBACK or c.laddr.ip.startswith("127."))
    )
    return (found[0][1], found[0][0]) if found else None


def ask(host: str, port: int, request: bytes, deadline: float) -> bytes | None:
    """The body of a 200 answer to `request`; None for any other answer, one past MAX_ANSWER,
    or none by `deadline` (time.monotonic())."""
    try:
        with socket.create_connection((host, port), timeout=_left(deadline)) as sock:
            sock.sendall(request)
            data = bytearray()
            while len(data) <= MAX_ANSWER + 4096:
                sock.settimeout(_left(deadline))
                chunk = sock.recv(64 << 10)
                if not chunk:
                    return body(bytes(data))
                data += chunk
    except (OSError, ValueError):
        return None  # refused, reset, timed out, or the deadline passed
    return None


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise ValueError("deadline passed")
    return left


def body(answer: bytes) -> bytes | None:
    """The body of an HTTP answer with status 200 and at most MAX_ANSWER bytes of it."""
    head, sep, rest = answer.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if not sep or len(status) < 2 or status[1] != b"200" or len(rest) > MAX_ANSWER:
        return None
    return rest


def _get(path: str, server: Server) -> bytes:
    return f"GET {path} HTTP/1.0\r\nHost: {server.host}:{server.port}\r\n\r\n".encode()


def _post(path: str, server: Server, payload: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.0\r\nHost: {server.host}:{server.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload


def read_ps(data: bytes) -> dict[str, ModelClaim] | None:
    """Each loaded model's size and GPU bytes, by name; None for an answer that is not
    /api/ps's. A model whose name or sizes make no sense is left out."""
    try:
        ps = _ps.decode(data)
    except msgspec.DecodeError:
        return None
    return {
        m.name: ModelClaim(SOURCE, m.size, m.size_vram)
        for m in ps.models
        if good_name(m.name) and m.size > 0 and m.size_vram >= 0
    }


def read_show(data: bytes) -> str | None:
    """The name of the model file /api/show's `FROM` line names (`sha256-<hex>`)."""
    try:
        shown = _show.decode(data)
    except msgspec.DecodeError:
        return None
    for line in shown.modelfile.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word.upper() == "FROM" and rest.strip():
            return rest.strip().strip('"').replace("\\", "/").rsplit("/", 1)[-1]
    return None


def good_name(name: str) -> bool:
    """A model name fit to end a shard's id: printable, no spaces, not too long."""
    return (
        bool(name)
        and len(name.encode()) <= MAX_NAME_BYTES
        and name.isprintable()
        and (" " not in name)
    )


class Reports:
    """What Ollama's servers say; the model file each name was loaded from is kept, so a
    child is named once per server, not at every walk."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: dict[tuple[int, int, str], str] = {}
        """(server pid, port, model file) -> the model's name."""

    def address(self, pid: int) -> tuple[str, int] | None:
        return address(pid)

    def claims(self, server: Server, deadline: float) -> Mapping[str, ModelClaim] | None:
        data = ask(server.host, server.port, _get("/api/ps", server), deadline)
        return read_ps(data) if data is not None else None

    def model_name(self, server: Server, launch: Launch, deadline: float) -> str | None:
        blob = ENGINE.served_model(launch)
        if blob is None:
            return None
        key = (server.pid, server.port, blob)
        with self._lock:
            if key in self._names:
                return self._names[key]
        with self._lock:
            known = {n for (pid, port, _), n in self._names.items() if (pid, port) == key[:2]}
        loaded = [n for n in self.claims(server, deadline) or () if n not in known]
        for name in loaded[:MAX_SHOWN]:
            payload = msgspec.json.encode({"model": name})
            data = ask(server.host, server.port, _post("/api/show", server, payload), deadline)
            shown = read_show(data) if data is not None else None
            if shown is not None:
                self._keep((server.pid, server.port, shown), name)
            if shown == blob:
                return name
        return None

    def _keep(self, key: tuple[int, int, str], name: str) -> None:
        with self._lock:
            self._names[key] = name
            if len(self._names) > MAX_NAMES:
                del self._names[next(iter(self._names))]


REPORTS = Reports()
