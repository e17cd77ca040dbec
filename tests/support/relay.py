"""A TCP relay between a client and a real server, which a test cuts and mends as a network
partition does: cut, every connection through it is closed and new ones are closed as they
come; mended, it relays again."""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class Relay:
    def __init__(self, port: int) -> None:
        self.upstream = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"nats://127.0.0.1:{self.listener.getsockname()[1]}"
        self.relaying = True
        self.accepted = 0
        """Connections relayed so far."""
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self.relaying = False
        with self._lock:
            open_, self._open = self._open, []
        for sock in open_:
            _close(sock)

    def mend(self) -> None:
        self.relaying = True

    def __enter__(self) -> Relay:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cut()
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            if not self.relaying:
                _close(client)
                continue
            server = socket.create_connection(self.upstream)
            with self._lock:
                self._open += [client, server]
                self.accepted += 1
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    _close(source)
    _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
