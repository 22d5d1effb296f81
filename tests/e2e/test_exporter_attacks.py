"""A real `gpudiag serve` (its own process, over the fake NVIDIA node, basic auth on) under the attacks of issue 10
items 5-7: valid scrapes keep succeeding (>= 95 %) and the server's memory stays bounded while the attack runs.

Each attack is 16 clients for a few seconds on loopback (tests/support/http_attacks.py: bounded loops that stop by
themselves). On the code before the fix: the header flood took the server from ~45 MiB to hundreds of MiB, and the
bcrypt flood and slowloris left most scrapes refused.
"""

from __future__ import annotations

import socket
import time

import bcrypt
import pytest

from tests.support.http_attacks import (
    Target, basic_auth, bcrypt_flood, connection_flood, header_flood, read_all, scrape_once, slowloris,
    under_attack,
)

pytestmark = pytest.mark.slow  # end to end: real servers and processes (tests/README.md)

USER, PASSWORD = "prometheus", "s3cret"
SCRAPER = basic_auth(USER, PASSWORD)
ATTACK_SECONDS = 3.0
MIN_SUCCESS = 0.95
MAX_RSS_GROWTH_MIB = 40  # 16 connections × an 8 KiB head is nothing; the unbounded parser grew by hundreds


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    root = tmp_path_factory.mktemp("node")
    config = root / "web.yml"
    # cost 10: what the unit's comment tells operators to use (htpasswd -nBC 10)
    config.write_text(f"basic_auth_users:\n  {USER}: "
                      f"'{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()}'\n")
    target = Target(root, ("--web-config", str(config)))
    deadline = time.monotonic() + 20
    while not scrape_once(target.address, SCRAPER):  # also puts the scraper's credentials in the cache
        assert time.monotonic() < deadline, "the exporter never served a scrape"
        time.sleep(0.1)
    yield target
    target.stop()


def settle(target: Target) -> float:
    """The RSS once the previous attack's connections are gone, the baseline the next attack is measured from."""
    time.sleep(0.5)
    return target.rss_mib()


def assert_held(outcome, baseline_mib: float) -> None:
    failed = [round(seconds, 2) for ok, seconds in outcome.scrapes if not ok]
    assert len(outcome.scrapes) >= 10, "the scraper hardly ran"
    assert outcome.success_rate >= MIN_SUCCESS, f"{len(failed)} of {len(outcome.scrapes)} scrapes failed: {failed}"
    assert outcome.peak_rss_mib - baseline_mib < MAX_RSS_GROWTH_MIB, (baseline_mib, outcome.peak_rss_mib)


def test_header_flood_is_cut_off_at_the_header_cap(target):
    baseline = settle(target)
    outcome = under_attack(target, header_flood, ATTACK_SECONDS, authorization=SCRAPER)
    assert outcome.attack_requests > 16  # the flood ran (each client was cut off and came back)
    assert_held(outcome, baseline)


def test_wrong_password_flood_does_not_starve_valid_scrapes(target):
    baseline = settle(target)
    cpu_before = target.cpu_seconds()
    outcome = under_attack(target, bcrypt_flood(USER), ATTACK_SECONDS, authorization=SCRAPER)
    cpu = (target.cpu_seconds() - cpu_before) / ATTACK_SECONDS
    assert outcome.attack_requests > 16
    assert_held(outcome, baseline)
    # bcrypt runs one at a time: about one core plus the scrapes, not one core per attacker (189 % on 2 cores
    # before). The bound leaves room for a loaded CI machine (134 % seen while other suites ran); that only one
    # bcrypt runs at a time is pinned exactly in tests/exporter/web/test_auth.py.
    assert cpu < 1.6, f"{cpu:.0%} of a core"


def test_slowloris_does_not_hold_the_scrapers_out(target):
    baseline = settle(target)
    outcome = under_attack(target, slowloris(every=0.3), ATTACK_SECONDS, authorization=SCRAPER)
    assert_held(outcome, baseline)


def test_idle_connection_flood_does_not_hold_the_scrapers_out(target):
    baseline = settle(target)
    outcome = under_attack(target, connection_flood, ATTACK_SECONDS, authorization=SCRAPER)
    assert outcome.attack_requests >= 16 * 4
    assert_held(outcome, baseline)


def test_oversized_heads_are_answered_431_and_414_and_closed(target):
    for head, status in ((b"GET /metrics HTTP/1.1\r\n" + b"X-Big: " + b"a" * 9000 + b"\r\n\r\n", b"431"),
                         (b"GET /" + b"m" * 9000 + b" HTTP/1.1\r\n\r\n", b"414")):
        sock = socket.create_connection(target.address, timeout=5)
        sock.sendall(head)
        reply = read_all(sock)
        assert reply.startswith(b"HTTP/1.1 " + status + b" "), reply[:80]
        assert b"Connection: close" in reply
