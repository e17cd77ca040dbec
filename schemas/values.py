"""The bounded values the messages are made of: counts, shares and times.

msgspec checks each on decode, so a message with a negative byte count or a share over 100
is refused whole rather than read as what it cannot mean.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Percent = Annotated[float, msgspec.Meta(ge=0, le=100)]
WholePercent = Annotated[int, msgspec.Meta(ge=0, le=100)]
Time = Annotated[datetime, msgspec.Meta(extra_json_schema={"format": "date-time"})]
"""A UTC time: an RFC 3339 string in JSON (`2026-11-30T06:12:03.120113Z`); in msgpack the
timestamp extension type (-1), which msgpack libraries read as a time."""
