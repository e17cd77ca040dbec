"""An engine's line as it said it: without the colour codes and the prefixes that posters,
journald, docker and the engines' own log formats put before it, and which engine's log
format it came in.

The prefixes are taken off one after another, up to eight, because they stack: journald's
`Apr 18 19:28:59 host ollama[1170]:` comes before Ollama's own `time=...`, then its
`level=INFO source=server.go:368`; llama.cpp's `0.00.004.496 I` before its module tag
`cmn  common_param:`.
"""

from __future__ import annotations

import re

_MODULE_TAG = r"(?:cmn|srv|slot|spec|que|res)\s+[\w~()]{1,12}:(?=\s|$)"
"""llama.cpp's module tag and the function that logged, as common/ and the server print them
(b11434: `cmn  common_param:`, `srv    load_model:`, `slot   load_model:`): the tag, then
`__func__` cut and right-aligned to 12 characters (`%12.*s`), so a line of common/'s
`device_info` list reads `cmn  common_param:   - CUDA0   : ...` and nothing anchored at the
start of the message sees it until the tag is off. libllama's and ggml's lines carry none."""
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_PREFIX = re.compile(
    r"\s*(?:"
    r">\s?"  # quoted in an issue or a mail
    r"|\*\*"  # markdown bold around a pasted line
    r"|│\s*"  # a pager's box border (k9s)
    r"|\[[A-Z]+\]::\w+:"  # Jan's cortex: "[CORTEX]::Error:"
    # journald: "Apr 18 19:28:59 host ollama[1170]:" (the host may be missing or hold spaces)
    r"|[A-Za-z]{3}\s+\d{1,2}\s+\d\d:\d\d:\d\d\s+(?:[^\[\]\s][^\[\]]{0,63}?\s+)?"
    r"[\w.@/-]{1,64}\[\d{1,10}\]:"
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?(?=\s)"
    r"|\d\d:\d\d:\d\d(?:\.\d{1,9})?(?=\s)"  # a time of day alone
    r"|\[\d{1,10}\](?=\s)"  # llama.cpp's "[pid]"
    r"|\d{1,4}\.\d\d\.\d{3}\.\d{3}(?:\s+[EWIDT](?=\s))?"  # llama.cpp "0.00.305.659 I" (2025+)
    rf"|[EWIDT](?=\s+(?:[\w.]+:|{_MODULE_TAG}))"  # llama.cpp's level letter alone (b9181+)
    rf"|{_MODULE_TAG}"  # llama.cpp's module tag and function (common/, the server)
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?"  # vLLM
    r"|\((?:VllmWorkerProcess|Worker\w*|EngineCore\w*|APIServer)\s+pid=\d{1,10}\)"  # vLLM
    r"|[\w.-]{1,64}-\d{1,4}\s+\|(?=\s)"  # docker compose: "llama-1  | "
    r"|time=\S{1,64}(?=\s)"  # Ollama's logfmt time (or the poster's "time=...")
    r"|(?:(?:le)?vel=\w{1,8}\s+)?source=[\w./-]{1,64}\.go:\d{1,6}(?=\s)"  # Ollama's level, source
    r"|\[?[\w/.-]{1,64}\.py:\d{1,6}\]"  # vLLM's source line
    r")"
)
_MAX_PREFIXES = 8
_CONTROLS = str.maketrans({c: " " for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]})
"""C0 and C1 control characters (a tab included), each made a space."""
_OLLAMA_LINE = re.compile(r"\bsource=[\w./-]{1,64}\.go:\d|\bollama\[\d{1,10}\]:")
_VLLM_LINE = re.compile(r"\w\.py:\d{1,6}\]")


def clean_line(line: str) -> str:
    """The line without colour codes, other control characters, timestamps and the prefixes
    put before it. What is left may become a status's reason or evidence, shown in terminals
    and logs: an escape sequence a log line holds must not reach them."""
    text = _ANSI.sub("", line) if "\x1b" in line else line
    if not text.isprintable():
        text = text.translate(_CONTROLS)
    for _ in range(_MAX_PREFIXES):
        match = _PREFIX.match(text)
        if match is None or match.end() == 0:
            break
        text = text[match.end() :]
    text = text.strip()
    return text[:-2].rstrip() if text.endswith("**") else text


def is_ollama_format(line: str) -> bool:
    """Ollama's own logfmt line (`source=server.go:368`), or any line journald took from the
    ollama unit, which includes its runners' llama.cpp lines."""
    return _OLLAMA_LINE.search(line) is not None


def is_vllm_format(line: str) -> bool:
    """vLLM's logging format, which names the Python source line (`[__init__.py:256]`)."""
    return _VLLM_LINE.search(line) is not None
