"""gpudiag.fleet.jsonstream: values read across every chunk boundary are what json.loads reads; a value past its
bound, a document cut short, text that is not JSON are Malformed; noise is skipped to the next report's line."""

from __future__ import annotations

import io
import json
import math

import pytest

from gpudiag.fleet.jsonstream import Malformed, Reader

DOCUMENT = ('{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"instance": "n1:9858", '
            '"model": "NVIDIA H200 \\u00e9\\ud83d\\ude00"}, "value": [1764626643.123, "2.5e+3"]}, '
            '12345678901234567890, '
            '-0.5e-7, true, null, NaN, -Infinity, [], {}]}, "warnings": ["a \\"quoted\\" one"]}')


def chunked(text: str, size: int) -> Reader:
    return Reader(io.BytesIO(text.encode()).read, chunk=size)


def read_all(reader: Reader, short_way: bool = True) -> dict:
    found: dict = {}
    for key in reader.members():
        if key == "data":
            for name in reader.members():
                if name == "result" and short_way:
                    found["result"] = list(reader.values(1 << 10))
                elif name == "result":
                    found["result"] = []
                    for _ in reader.elements():
                        found["result"].append(reader.value(1 << 10))
                else:
                    found[name] = reader.value(1 << 10)
        else:
            found[key] = reader.value(1 << 10)
    assert reader.peek() == ""
    return found


@pytest.mark.parametrize("short_way", [True, False], ids=["values", "elements"])
@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64, 1 << 16])
def test_values_across_every_chunk_boundary_are_what_json_loads_reads(size, short_way):
    expected = json.loads(DOCUMENT)
    found = read_all(chunked(DOCUMENT, size), short_way)
    assert found["resultType"] == "vector" and found["warnings"] == expected["warnings"]
    for got, want in zip(found["result"], expected["data"]["result"], strict=True):
        assert got == want or (isinstance(want, float) and math.isnan(want) and math.isnan(got))


@pytest.mark.parametrize("text, fragment", [
    (DOCUMENT[:150], "cut short"),
    ('{"a": [1, 2 3]}', "not JSON at character 12: Expecting ',' delimiter"),
    ('{"data": {"result": [{"a": 1}, {"a": 1} {"a": 1}]}}', "expected ',' or ']'"),
    ('{"data": {"result": [{"a": 1}, {"a": 1}, {"a": "' + "x" * 2000 + '"}]}}', "a value over 1,024 characters"),
    ('{"data": {"result": [{"a": 1}, {"a": 1}, {"a": tru]}}', "not JSON"),
    ('{"a": 1 "b": 2}', "expected ',' or '}' at character 8"),
    ('{"a": "' + "x" * 2000 + '"}', "a value over 1,024 characters"),
    ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    ('{1: 2}', "not a string"),
])
def test_what_is_not_whole_json_within_its_bounds_is_malformed(text, fragment):
    with pytest.raises(Malformed, match=fragment):
        read_all(chunked(text, 7))


def test_bytes_that_are_not_utf8_are_malformed_or_replaced():
    with pytest.raises(Malformed, match="not UTF-8"):
        read_all(Reader(io.BytesIO(b'{"a": "\xff"}').read, chunk=3))
    lenient = Reader(io.BytesIO(b'{"a": "\xff"}').read, chunk=3, errors="replace")
    assert read_all(lenient) == {"a": "\ufffd"}


def test_noise_is_skipped_to_the_next_line_that_starts_a_report():
    reader = chunked('kubectl: warning: x\n  {"not": "at the start"}\n{"a": 1}\n', 4)
    assert reader.peek() == "k"
    assert reader.skip_to_line_starting("{") == 'kubectl: warning: x\n  {"not": "at the start"}\n'
    assert reader.value(100) == {"a": 1} and reader.peek() == ""
    ending = chunked("noise without an end", 4)
    ending.peek()
    assert ending.skip_to_line_starting("{") == "noise without an end" and ending.peek() == ""
