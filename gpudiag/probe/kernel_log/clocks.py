"""Wall clocks of the kernel log's line formats (formats.py): the stamps' calendar conversions, done only for a line
that turns out to hold an event (LogLine.wall_time), and the month words of every locale journalctl prints."""

from __future__ import annotations

import re
from typing import Optional

from gpudiag.probe.patterns import lazy_compile

_A = re.ASCII

# journalctl and rsyslog print the month with strftime's %b, in the reader's locale (systemd logs-show.c): `Jan`, but
# also `jan.` (nb_NO), `фев` (ru_RU), `6月` (zh_CN), `april`; any word of letters or an `N月`/`N월` is taken for one.
MONTH = r"(?:[0-9]{1,2}[\u6708\uc6d4]|[^\x00-\x40\[\]\\^_`{|}~\x7f]{2,12}\.?)"
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                        "Dec"), start=1)}
_ISO_PARTS = lazy_compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[T ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:[.,]([0-9]{1,9}))?"
                          r"(Z|[+-][0-9]{2}:?[0-9]{2})?", _A)
_SYSLOG_TIME = lazy_compile(rf"({MONTH}) ([ 0-9]?[0-9]) ([0-9]{{2}}):([0-9]{{2}}):([0-9]{{2}})"
                            r"(?:\.([0-9]{1,9}))?", _A)
# %b in the locales journalctl is most often read in (glibc localedata/locales/*: abmon), lower case, without the
# point: a name not here leaves the line without a wall clock, never unread.
_LOCALE_MONTHS = {name: number for number, names in enumerate((
    "jan janv ene gen sty led", "feb febr fév févr fev фев lut úno", "mar mär mrt mars мар maa bře",
    "apr avr abr kwi апр dub", "may mai mei mag maj мая кві", "jun juin jun giu cze чер июн",
    "jul juil lug lip июл", "aug aoû août ago sie авг srp", "sep sept set wrz сен zář", "oct okt ott paź окт říj",
    "nov noi lis ноя", "dec déc dez dic gru дек pro"), start=1) for name in names.split()}


def wall_seconds(wall: object) -> Optional[float]:
    """A LogLine's wall_time in seconds (converted now if it was left as (converter, stamp))."""
    if isinstance(wall, tuple):
        return wall[0](wall[1])
    return wall if isinstance(wall, float) else None


def iso_seconds(text: str) -> Optional[float]:
    """An ISO 8601 / RFC 3339 stamp → epoch seconds (UTC when it names no zone); None if it is not one."""
    parts = _ISO_PARTS.match(text)
    if not parts:
        return None
    year, month, day, hour, minute, second = (int(parts[i]) for i in range(1, 7))
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        return None
    import calendar  # here: a check's imports do without it (issue 36, item 9)

    value = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)) + float(f"0.{parts[7] or 0}")
    zone = parts[8]
    if zone and zone != "Z":
        sign = -1 if zone[0] == "+" else 1
        digits = zone[1:].replace(":", "")
        value += sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)
    return value


def syslog_seconds(text: str) -> Optional[float]:
    """`Nov 30 11:08:44[.123]` (no year, no zone) → seconds on a clock that starts in 2000: good for telling lines of
    one file apart and in order, not for the date. An ISO stamp (short-iso) is read as such."""
    if text[8:9] == "-" and text[4:8].isdigit():  # short-full: "Tue 2026-11-30 11:08:44 UTC", the zone read as UTC
        return iso_seconds(text[4:23].replace(" ", "T"))
    parts = _SYSLOG_TIME.match(text)
    if not parts:
        return iso_seconds(text)
    month = month_number(parts[1])
    if month is None:
        return None
    day, hour, minute, second = int(parts[2]), int(parts[3]), int(parts[4]), int(parts[5])
    if not (1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        return None
    import calendar  # here: a check's imports do without it (issue 36, item 9)

    return calendar.timegm((2000, month, day, hour, minute, second, 0, 0, 0)) + float(f"0.{parts[6] or 0}")


def month_number(name: str) -> Optional[int]:
    """A month as %b prints it in English or another locale (`Jan`, `jan.`, `фев`, `6月`) → 1-12, or None."""
    if name[-1:] in "\u6708\uc6d4":
        number = int(name[:-1]) if name[:-1].isascii() and name[:-1].isdigit() else 0
        return number if 1 <= number <= 12 else None
    english = _MONTHS.get(name)
    if english is not None:
        return english
    word = name.rstrip(".").lower()
    return _LOCALE_MONTHS.get(word) or _LOCALE_MONTHS.get(word[:4]) or _LOCALE_MONTHS.get(word[:3])


def ctime_seconds(stamp: re.Match) -> Optional[float]:
    month = _MONTHS.get(stamp[1])
    day, hour, minute, second = int(stamp[2]), int(stamp[3]), int(stamp[4]), int(stamp[5])
    if month is None or not (1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        return None
    import calendar  # here: a check's imports do without it (issue 36, item 9)

    return float(calendar.timegm((int(stamp[6]), month, day, hour, minute, second, 0, 0, 0)))  # dmesg -T: local
