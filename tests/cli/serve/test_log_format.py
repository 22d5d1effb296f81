"""The exporter's log lines as written: logfmt and JSON, one record a line whatever the values hold; --log.level
filtering; the per-key bound for lines logged outside the change tracker (gpudiag/cli/serve/log_format.py,
gpudiag/cli/serve/log_bound.py)."""

from __future__ import annotations

import io
import json
import logging

import pytest

from gpudiag.cli.serve.log_bound import BoundFilter, RateBound
from tests.support.log import parse_logfmt
from gpudiag.cli.serve.log_format import (MAX_VALUE_CHARS, JsonFormatter, LogfmtFormatter, daemon_logging, level_name,
                                          logfmt_value)

# What a driver, a kernel-log line or a GPU's name could hold to forge a record of its own: line ends of every kind
# (journald splits on \n; a terminal or a viewer on \r, NEL, U+2028), quotes, an escape character, an `=` that starts
# a field, a lone surrogate from bytes that were not UTF-8, a NUL.
HOSTILE = ('NVIDIA H200\nts=2026-12-02T03:10:00.000Z level=error source=x.py:1 msg="forged" gpu=7'
           '\r level=error msg=forged\u2028\x85 x="y" \\" =z \udcff\x00\x1b[31m')


def record(message: str = "GPU lost", level: int = logging.WARNING, fields=None, exc_info=None) -> logging.LogRecord:
    made = logging.LogRecord("gpudiag.cli.serve.changes", level, "/x/changes.py", 42, message, None, exc_info)
    made.created = 1796181000.123456  # 2026-12-02T03:10:00.123Z
    if fields is not None:
        made.fields = fields
    return made


def test_a_logfmt_line_has_node_exporters_shape():
    line = LogfmtFormatter().format(record(fields={"gpu": 3, "bus_id": "0000:1b:00.0", "uuid": None,
                                                   "up": False, "seconds": 1.5}))
    assert line == ('ts=2026-12-02T03:10:00.123Z level=warn source=changes.py:42 msg="GPU lost" gpu=3 '
                    'bus_id=0000:1b:00.0 up=false seconds=1.5')  # uuid None: not known, left out


@pytest.mark.parametrize("levelno,name", [(logging.DEBUG, "debug"), (logging.INFO, "info"),
                                          (logging.WARNING, "warn"), (logging.ERROR, "error"),
                                          (logging.CRITICAL, "error")])
def test_levels_are_node_exporters_names(levelno, name):
    assert level_name(levelno) == name


def test_hostile_text_cannot_forge_a_line_or_a_field_in_logfmt():
    line = LogfmtFormatter().format(record(f"check status changed: {HOSTILE}", fields={"name": HOSTILE, "gpu": 1}))
    assert "\n" not in line and "\r" not in line and len(line.splitlines()) == 1
    assert line.isprintable()
    pairs = parse_logfmt(line)
    assert [k for k, _ in pairs] == ["ts", "level", "source", "msg", "name", "gpu"]  # no field of the text's own
    assert dict(pairs)["name"] == HOSTILE and dict(pairs)["msg"] == f"check status changed: {HOSTILE}"
    assert dict(pairs)["level"] == "warn"
    line.encode("utf-8")  # the lone surrogate is an escape: the line can be written whatever stderr's encoding


def test_hostile_text_cannot_forge_a_line_or_a_key_in_json():
    line = JsonFormatter().format(record(HOSTILE, fields={"name": HOSTILE, "gpu": 1, "nan": float("nan")}))
    assert len(line.splitlines()) == 1 and line.isascii()
    document = json.loads(line)
    assert document["msg"] == HOSTILE and document["name"] == HOSTILE and document["gpu"] == 1
    assert document["nan"] == "nan"  # not a bare NaN, which is no JSON
    assert list(document) == ["ts", "level", "source", "msg", "name", "gpu", "nan"]


def test_keys_are_reduced_and_cannot_stand_in_for_the_records_own():
    line = LogfmtFormatter().format(record(fields={"a b=c\n": 1, "msg": "forged", "level": "error"}))
    assert parse_logfmt(line)[3:] == [("msg", "GPU lost"), ("a_b_c_", "1"), ("field_msg", "forged"),
                                      ("field_level", "error")]


def test_values_are_bounded_and_empty_ones_still_read():
    line = LogfmtFormatter().format(record("x" * 5000, fields={"error": "y" * 5000, "empty": ""}))
    pairs = dict(parse_logfmt(line))
    assert len(pairs["msg"]) == MAX_VALUE_CHARS and pairs["msg"].endswith("…")
    assert len(pairs["error"]) == MAX_VALUE_CHARS and pairs["empty"] == ""
    assert logfmt_value("") == '""' and logfmt_value("a=b") == '"a=b"' and logfmt_value("plain") == "plain"


def test_a_traceback_is_one_field_of_one_line():
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        import sys

        exc_info = sys.exc_info()
    line = LogfmtFormatter().format(record("collection failed", logging.ERROR, exc_info=exc_info))
    pairs = dict(parse_logfmt(line))
    assert len(line.splitlines()) == 1 and "Traceback" in pairs["exception"] and "ValueError: bad\nthing" in pairs[
        "exception"]
    assert "ValueError" in json.loads(JsonFormatter().format(record(exc_info=exc_info)))["exception"]


def test_log_level_filters_and_logging_is_left_as_it_was(capsys):
    logger = logging.getLogger("gpudiag")
    before = (logger.level, logger.propagate, list(logger.handlers))
    with daemon_logging("warn", "logfmt"):
        logging.getLogger("gpudiag.cli.serve.changes").info("GPU back")
        logging.getLogger("gpudiag.cli.serve.changes").warning("GPU lost", extra={"fields": {"gpu": 1}})
        logging.getLogger("gpudiag.cli.serve.changes").debug("detail")
    assert (logger.level, logger.propagate, list(logger.handlers)) == before
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and 'msg="GPU lost" gpu=1' in lines[0] and "level=warn" in lines[0]
    with daemon_logging("debug", "json"):
        logging.getLogger("gpudiag.x").debug("detail")
        logging.getLogger("gpudiag.x").error("bad")
    assert [json.loads(line)["level"] for line in capsys.readouterr().err.splitlines()] == ["debug", "error"]
    with daemon_logging("error", "json"):
        logging.getLogger("gpudiag.x").warning("not shown")
    assert capsys.readouterr().err == ""


def test_a_bad_level_or_format_is_refused():
    with pytest.raises(ValueError):
        with daemon_logging("verbose", "logfmt"):
            pass
    with pytest.raises(ValueError):
        with daemon_logging("info", "text"):
            pass


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


def test_lines_logged_under_a_bound_key_are_bounded_and_the_next_one_says_how_many_were_held():
    clock = Clock()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(LogfmtFormatter())
    handler.addFilter(BoundFilter(RateBound(per_window=2, window_seconds=60.0, clock=clock)))
    logger = logging.getLogger("gpudiag.test.bound")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        for _ in range(10):
            logger.warning("TLS certificate files changed but do not load", extra={"bound": ("tls",)})
        logger.warning("something else")  # no key: never held
        clock.now += 61
        logger.info("TLS certificate reloaded", extra={"bound": ("tls",)})
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
        logger.propagate = True
    lines = stream.getvalue().splitlines()
    assert [dict(parse_logfmt(line))["msg"] for line in lines] == [
        "TLS certificate files changed but do not load"] * 2 + ["something else", "TLS certificate reloaded"]
    assert dict(parse_logfmt(lines[-1]))["suppressed"] == "8"
