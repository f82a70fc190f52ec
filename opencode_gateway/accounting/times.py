"""Times as reports and tables say them: a Unix time written in UTC, the dates, `today`, `7d` and
time zones a person gives `--since`, `--until` and `--tz`."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import SettingsError

__all__ = ["parse_time", "utc_time", "zone"]


def utc_time(seconds: float | None, missing: str = "—") -> str:
    """A Unix time as `2026-12-05 14:03:09` (UTC), as every table here writes it."""
    return missing if seconds is None else datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def zone(name: str | None) -> tzinfo:
    """`--tz`: an IANA zone (Europe/Berlin), a UTC offset (+02:00, -0530) or UTC (None)."""
    if not name or name.upper() == "UTC":
        return timezone.utc
    offset = re.fullmatch(r"([+-])(\d{2}):?(\d{2})", name)
    if offset:
        minutes = int(offset.group(2)) * 60 + int(offset.group(3))
        return timezone(timedelta(minutes=minutes if offset.group(1) == "+" else -minutes))
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise SettingsError(
            f"--tz {name!r} is not a time zone: give an IANA name (Europe/Berlin), an offset (+02:00) or UTC"
        ) from None


_RELATIVE = re.compile(r"(\d+)([hdw])")
_UNITS = {"h": 3600, "d": 86400, "w": 7 * 86400}


def parse_time(text: str, *, end_of_day: bool = False, tz: tzinfo = timezone.utc, now: float | None = None) -> float:
    """Unix seconds of a date (YYYY-MM-DD, in `tz`), an ISO 8601 time, `today`, `yesterday`, or a
    time ago (`24h`, `7d`, `2w`). A date (and today, yesterday) given `end_of_day` is its end."""
    now = time.time() if now is None else now
    relative = _RELATIVE.fullmatch(text.strip().lower())
    if relative:
        return now - int(relative.group(1)) * _UNITS[relative.group(2)]
    day = {"today": 0, "yesterday": 1}.get(text.strip().lower())
    if day is not None:
        text = (datetime.fromtimestamp(now, tz).date() - timedelta(days=day)).isoformat()
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise SettingsError(
            f"{text!r} is not a date: use YYYY-MM-DD, an ISO 8601 time, today, yesterday, or a time "
            "ago such as 24h, 7d or 2w"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz)
    seconds = moment.timestamp()
    return seconds + 86400 if end_of_day and len(text) == 10 else seconds
