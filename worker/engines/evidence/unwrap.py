"""An engine's lines out of the files that wrap them: the kubelet's CRI log, Docker's
json-file log and llama.cpp's `--log-jsonl`.

- CRI (`/var/log/pods/<ns>_<pod>_<uid>/<container>/N.log`, the kubelet's format for every
  runtime): `<RFC 3339 time> <stdout|stderr> <F|P> <text>`; `P` is part of a line the
  runtime cut (16 KiB in containerd), continued by the next entry of the same stream, up to
  its `F`.
- Docker's json-file driver (`/var/lib/docker/containers/<id>/<id>-json.log`): one object a
  line, `{"log": "text\\n", "stream": "stderr", "time": "..."}`; a `log` that does not end
  in a newline is a part, continued by the next entry of the same stream.
- llama.cpp's `--log-jsonl` (b11434, common/log.cpp): `{"type": "log", "time": N, "level":
  "info", "msg": "srv  llama_server: initializing ...\\n"}`; other types
  (`fit_memory_breakdown`) carry no line. What llama.cpp writes straight to stderr (its
  argument warnings) stays plain text in the same file.

A line in none of these formats is passed on as it is, so one follower reads them all.
"""

from __future__ import annotations

import re

import msgspec

MAX_JOINED = 64 << 10
"""The most characters a line joined from parts keeps (LogTail's own bound)."""
MAX_STREAMS = 4
"""The most streams with a part held: CRI has two, but Docker's `stream` is any text a line
gives, and a part is held for each until it ends."""

_CRI = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]{8,18}(?:Z|[+-]\d\d:\d\d) (stdout|stderr) ([FP]) ?")


class _Docker(msgspec.Struct):
    log: str
    stream: str = "stdout"


class _Jsonl(msgspec.Struct):
    type: str
    msg: str = ""


_docker = msgspec.json.Decoder(_Docker)
_jsonl = msgspec.json.Decoder(_Jsonl)


class Unwrap:
    """The engine's own lines from the lines of one followed file, parts joined."""

    def __init__(self) -> None:
        self._parts: dict[str, str] = {}

    def lines(self, line: str) -> list[str]:
        """The engine's lines that `line` completes: none for a part, or for a JSON entry
        that carries no line."""
        if line[:1] == "{":
            return self._json(line)
        if line[:1].isdigit():
            cri = _CRI.match(line)
            if cri is not None:
                return self._joined(cri[1], line[cri.end() :], whole=cri[2] == "F")
        return [line]

    def _json(self, line: str) -> list[str]:
        if line.startswith('{"log":'):
            try:
                entry = _docker.decode(line)
            except msgspec.DecodeError:
                return [line]
            text = entry.log
            done = text.endswith("\n")
            return [
                inner
                for whole in self._joined(entry.stream, text.rstrip("\r\n"), whole=done)
                for inner in self.lines(whole)
            ]
        if line.startswith('{"type":'):
            try:
                entry_ = _jsonl.decode(line)
            except msgspec.DecodeError:
                return [line]
            return entry_.msg.rstrip("\n").split("\n") if entry_.type == "log" else []
        return [line]

    def _joined(self, stream: str, text: str, *, whole: bool) -> list[str]:
        text = self._parts.pop(stream, "") + text
        if whole:
            return [text[:MAX_JOINED]]
        self._parts[stream] = text[:MAX_JOINED]
        if len(self._parts) > MAX_STREAMS:
            del self._parts[next(iter(self._parts))]  # the stream that has waited longest
        return []
