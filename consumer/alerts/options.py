"""`placewatch alerts`' own flags, each with an environment variable, checked into Options.

A flag wins over its variable; static labels and annotations merge, a `--label` replacing
the same name from PLACEWATCH_ALERTS_LABELS. Every error names the flag or variable that
gave the bad value and what to give instead.

The variables are PLACEWATCH_ALERTS_<FLAG>. The node's settings loader (placewatch.worker.config)
passes over them, and refuses any other PLACEWATCH_* variable it does not know; the ones
read here are checked here.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from placewatch.schemas.evidence import BLIND_AFTER_S

from .alertmanager import IDENTITY, OWN_ANNOTATIONS, name_problem

DEFAULT_DURABLE = "placewatch-alerts"
HTTP_TIMEOUT_S = 10.0
RESEND_S = 60.0
FORMATS = ("json", "alertmanager")
ENV_PREFIX = "PLACEWATCH_ALERTS_"
ENVIRONMENT = {
    "durable": "PLACEWATCH_ALERTS_DURABLE",
    "webhook": "PLACEWATCH_ALERTS_WEBHOOK",
    "format": "PLACEWATCH_ALERTS_FORMAT",
    "generator_url": "PLACEWATCH_ALERTS_GENERATOR_URL",
    "resend": "PLACEWATCH_ALERTS_RESEND",
    "timeout": "PLACEWATCH_ALERTS_TIMEOUT",
    "label": "PLACEWATCH_ALERTS_LABELS",
    "annotation": "PLACEWATCH_ALERTS_ANNOTATIONS",
    "blind_after": "PLACEWATCH_ALERTS_BLIND_AFTER",
}
"""Each flag's variable, by the flag's argparse name."""
_ENV_KEY = "alerts_environment"


class OptionError(Exception):
    """A flag or variable cannot be used; the message names it and what to give."""


@dataclass(frozen=True)
class Options:
    durable: str = DEFAULT_DURABLE
    webhook: str | None = None
    format: str = "json"
    generator_url: str | None = None
    resend: float = RESEND_S
    timeout: float = HTTP_TIMEOUT_S
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    blind_after: float = BLIND_AFTER_S


def add_arguments(
    alerts: argparse.ArgumentParser, environ: Mapping[str, str] | None = None
) -> None:
    """The flags, and the PLACEWATCH_ALERTS_* variables of `environ` (the process's by
    default) for `options()` to read."""
    env = _ours(os.environ if environ is None else environ)
    alerts.set_defaults(**{_ENV_KEY: env})
    alerts.epilog = (
        "Each flag has an environment variable, the flag winning: "
        + ", ".join(f"{_flag(dest)} {var}" for dest, var in ENVIRONMENT.items())
        + " (labels and annotations comma-separated NAME=VALUE)."
    )
    flag = alerts.add_argument
    flag(
        "--durable",
        metavar="NAME",
        help=f"the durable consumer's name; it keeps the position ({DEFAULT_DURABLE})",
    )
    flag("--webhook", metavar="URL", help="POST each event here (2xx: delivered)")
    flag(
        "--format",
        choices=FORMATS,
        help="webhook body: the event's JSON, or Alertmanager's POST /api/v2/alerts (json)",
    )
    flag("--generator-url", metavar="URL", help="Alertmanager format: each alert's generatorURL")
    flag(
        "--resend",
        type=float,
        metavar="SECONDS",
        help=f"Alertmanager format: post firing alerts again this often; 0: never ({RESEND_S:g})",
    )
    flag(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help=f"limit for one webhook request ({HTTP_TIMEOUT_S:g})",
    )
    flag(
        "--blind-after",
        type=float,
        metavar="SECONDS",
        help="Alertmanager format: a shard without evidence, or a node without a GPU tool "
        f"answering, this long is an alert of its own; 0: never ({BLIND_AFTER_S:g})",
    )
    flag(
        "--label",
        action="append",
        metavar="NAME=VALUE",
        help="Alertmanager format: a static label on every alert (repeatable); "
        "severity=... replaces the one per verdict",
    )
    flag(
        "--annotation",
        action="append",
        metavar="NAME=VALUE",
        help="Alertmanager format: a static annotation on every alert (repeatable)",
    )


def options(args: argparse.Namespace) -> Options:
    """The flags given over the variables over the defaults; OptionError names a bad one."""
    env: dict[str, str] = getattr(args, _ENV_KEY, None) or {}
    unknown = sorted(set(env) - set(ENVIRONMENT.values()))
    if unknown:
        raise OptionError(
            f"environment variable {unknown[0]} is not a setting of placewatch alerts; "
            f"known: {', '.join(ENVIRONMENT.values())}"
        )
    given: dict[str, Any] = {}
    for dest in ("durable", "webhook", "generator_url"):
        value = _pick(args, env, dest)
        if value is not None:
            given[dest] = value
    fmt = _pick(args, env, "format")
    if fmt is not None:
        if fmt not in FORMATS:
            raise OptionError(f"{ENVIRONMENT['format']}={fmt!r}: give json or alertmanager")
        given["format"] = fmt
    given["resend"] = _seconds(args, env, "resend", RESEND_S, zero=True)
    given["timeout"] = _seconds(args, env, "timeout", HTTP_TIMEOUT_S, zero=False)
    given["blind_after"] = _seconds(args, env, "blind_after", BLIND_AFTER_S, zero=True)
    given["labels"] = _pairs(args, env, "label", IDENTITY)
    given["annotations"] = _pairs(args, env, "annotation", OWN_ANNOTATIONS)
    return Options(**given)


def _ours(environ: Mapping[str, str]) -> dict[str, str]:
    """The PLACEWATCH_ALERTS_* variables; an unknown one is an error for `options()` to say
    (a misspelled variable must not be ignored)."""
    return {name: value for name, value in environ.items() if name.startswith(ENV_PREFIX)}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _pick(args: argparse.Namespace, env: dict[str, str], dest: str) -> str | None:
    value = getattr(args, dest, None)
    if value is not None:
        return str(value)
    return env.get(ENVIRONMENT[dest]) or None


def _seconds(
    args: argparse.Namespace, env: dict[str, str], dest: str, default: float, *, zero: bool
) -> float:
    value = getattr(args, dest, None)
    where = f"{_flag(dest)} {value:g}" if value is not None else ""
    text = env.get(ENVIRONMENT[dest])
    if value is None and text:
        where = f"{ENVIRONMENT[dest]}={text!r}"
        try:
            value = float(text)
        except ValueError:
            value = math.nan
    if value is None:
        return default
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        what = "0 or more (0: never)" if zero else "more than 0"
        raise OptionError(f"{where}: give a number of seconds, {what}")
    return float(value)


def _pairs(
    args: argparse.Namespace, env: dict[str, str], dest: str, reserved: tuple[str, ...]
) -> dict[str, str]:
    """NAME=VALUE pairs from the variable (comma-separated), then the flags."""
    found: dict[str, str] = {}
    var = ENVIRONMENT[dest]
    for item in (env.get(var) or "").split(","):
        if item.strip():
            _pair(item.strip(), var, reserved, found)
    for item in getattr(args, dest, None) or []:
        _pair(item, f"--{dest}", reserved, found)
    return found


def _pair(item: str, where: str, reserved: tuple[str, ...], into: dict[str, str]) -> None:
    name, sep, value = item.partition("=")
    name = name.strip()
    if not sep or not value:
        raise OptionError(f"{where} {item!r}: give NAME=VALUE, such as team=inference")
    problem = name_problem(name)
    if problem is not None:
        raise OptionError(f"{where} {item!r}: {problem}")
    if name in reserved:
        raise OptionError(
            f"{where} {item!r}: {name} is set from each shard's status; pick another name"
        )
    into[name] = value
