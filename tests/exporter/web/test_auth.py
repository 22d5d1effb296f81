"""Basic auth against bcrypt hashes without a CPU denial of service (issue 10, items 6 and 8): one bcrypt check at a
time, results cached in bounded caches, a short queue, and unknown users as slow as known ones.

bcrypt itself is the real package; the spy below only counts and times the calls that reach it."""

from __future__ import annotations

import base64
import statistics
import threading
import time

import bcrypt
import pytest

from gpudiag.exporter.web.config import AuthBusy, BasicAuth


def header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def hashed(password: str, cost: int = 4) -> bytes:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost))


class Spy:
    """Wraps bcrypt.checkpw: counts calls, the most that ran at once, and can hold a call until released."""

    def __init__(self, monkeypatch, hold: bool = False, delay: float = 0.0):
        self.calls, self.running, self.most = 0, 0, 0
        self.entered, self.release = threading.Event(), threading.Event()
        self.hold, self.delay = hold, delay
        self._lock = threading.Lock()
        real = bcrypt.checkpw

        def checkpw(password, hashed_password):
            with self._lock:
                self.calls += 1
                self.running += 1
                self.most = max(self.most, self.running)
            self.entered.set()
            try:
                if self.hold:
                    self.release.wait(5)
                time.sleep(self.delay)
                return real(password, hashed_password)
            finally:
                with self._lock:
                    self.running -= 1

        monkeypatch.setattr(bcrypt, "checkpw", checkpw)


def test_right_and_wrong_passwords():
    auth = BasicAuth({"prometheus": hashed("s3cret")})
    assert auth.check(header("prometheus", "s3cret")) is True
    assert auth.check(header("prometheus", "wrong")) is False
    assert auth.check(header("nobody", "s3cret")) is False
    assert auth.check(None) is False


def test_a_verified_credential_and_a_repeated_wrong_one_cost_one_bcrypt_each(monkeypatch):
    auth = BasicAuth({"prometheus": hashed("s3cret")})
    spy = Spy(monkeypatch)
    for _ in range(5):
        assert auth.check(header("prometheus", "s3cret")) is True
        assert auth.check(header("prometheus", "wrong")) is False
        assert auth.check(header("nobody", "x")) is False
    assert spy.calls == 3


def test_a_flood_of_new_wrong_passwords_is_bounded_and_cannot_evict_the_scrapers_credential(monkeypatch):
    auth = BasicAuth({"prometheus": hashed("s3cret")}, failure_cache_size=8)
    spy = Spy(monkeypatch)
    assert auth.check(header("prometheus", "s3cret"))
    for n in range(50):
        assert not auth.check(header("prometheus", f"wrong-{n}"))
    assert len(auth._failed._keys) == 8  # bounded
    calls = spy.calls
    assert auth.check(header("prometheus", "s3cret")) and spy.calls == calls  # still a cache hit


def test_bcrypt_runs_one_check_at_a_time(monkeypatch):
    auth = BasicAuth({"prometheus": hashed("s3cret")})
    spy = Spy(monkeypatch, delay=0.05)
    threads = [threading.Thread(target=auth.check, args=(header("prometheus", f"wrong-{n}"),)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert spy.calls == 4 and spy.most == 1


def test_a_full_queue_answers_busy_at_once_and_cached_credentials_still_pass(monkeypatch):
    auth = BasicAuth({"prometheus": hashed("s3cret")}, max_waiting=1)
    assert auth.check(header("prometheus", "s3cret"))  # cached before the flood
    spy = Spy(monkeypatch, hold=True)
    first = threading.Thread(target=auth.check, args=(header("prometheus", "wrong-1"),))
    first.start()
    try:
        assert spy.entered.wait(5)
        started = time.monotonic()
        with pytest.raises(AuthBusy):
            auth.check(header("prometheus", "wrong-2"))
        assert time.monotonic() - started < 0.5  # no waiting behind the running check
        assert auth.check(header("prometheus", "s3cret"))  # no bcrypt needed
    finally:
        spy.release.set()
        first.join(5)
    assert spy.calls == 1


@pytest.mark.parametrize("cost", [6, 12])
def test_the_dummy_hash_for_unknown_users_has_the_users_cost(cost):
    auth = BasicAuth({"prometheus": b"$2b$%02d$" % cost + b"a" * 53})
    assert auth.dummy_hash.startswith(b"$2b$%02d$" % cost)


def test_an_unknown_user_takes_as_long_as_a_known_one():
    # Users at cost 6 (~4 ms): the dummy was cost 10 (~60 ms), 16 times slower, which told user names apart.
    auth = BasicAuth({"prometheus": hashed("s3cret", cost=6)})

    def median_seconds(user: str) -> float:
        times = []
        for n in range(9):
            started = time.perf_counter()
            assert not auth.check(header(user, f"wrong-{n}"))  # a new password each time: never cached
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    known, unknown = median_seconds("prometheus"), median_seconds("nobody")
    assert unknown < 3 * known, (known, unknown)
