"""What both device registries promise (pairing by code, wren.store.records.DeviceRegistry), on SQLite and on
Redis; with Redis, what one instance (or `wren devices`) writes, another sees."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from wren.store.records import CODE_TTL_S, MAX_PENDING, DeviceRegistry, token_digest
from wren.store.redis_devices import RedisDeviceRegistry, shared_secret
from wren.store.sqlite_devices import SqliteDeviceRegistry


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


def sign(client: str, device: str, at: int) -> str:
    return f"token:{client}:{device}:{at}"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["sqlite", "redis"])
def make_registry(request: pytest.FixtureRequest, tmp_path: Path, clock: Clock) -> Iterator:
    """Opens registries on the same storage, as two instances (or the server and `wren devices`) do."""
    opened: list[DeviceRegistry] = []

    def make() -> DeviceRegistry:
        if request.param == "sqlite":
            registry: DeviceRegistry = SqliteDeviceRegistry(tmp_path, clock=clock)
        else:
            registry = RedisDeviceRegistry(request.getfixturevalue("clean_redis"), clock=clock)
        opened.append(registry)
        return registry

    yield make
    for registry in opened:
        registry.close()


def test_a_device_keeps_its_code_while_it_is_valid_and_gets_a_new_one_after(make_registry, clock) -> None:
    registry = make_registry()
    first = registry.request("dev-1", "client-1", "192.0.2.7")
    assert len(first.code) == 6 and first.code.isdigit()
    assert registry.request("dev-1", "client-1", "192.0.2.7") == first
    assert registry.request("dev-1", "client-2", "192.0.2.7").code != first.code  # another client id
    assert registry.is_pending("dev-1", "client-1")
    clock.t += CODE_TTL_S + 1
    assert registry.pending() == [] and not registry.is_pending("dev-1", "client-1")
    assert registry.request("dev-1", "client-1", "192.0.2.7").created_at == clock.t


def test_an_approval_on_one_instance_admits_the_device_on_another(make_registry, clock) -> None:
    here, there = make_registry(), make_registry()
    code = here.request("dev-1", "client-1", "192.0.2.7").code
    assert there.approve("000000" if code != "000000" else "111111", sign) is None  # no such code
    device = there.approve(f" {code} ", sign)
    assert device is not None and device.token_sha256 == token_digest(sign("client-1", "dev-1", int(clock.t)))
    assert here.paired("dev-1") == device and here.paired_devices() == [device]
    assert here.pending() == []  # the request is used up
    clock.t += 100
    here.resign("dev-1", int(clock.t), "renewed")
    renewed = there.paired("dev-1")
    assert renewed is not None and renewed.token_sha256 == token_digest("renewed")
    assert renewed.approved_at == device.approved_at and renewed.signed_at == int(clock.t)
    assert there.revoke("dev-1") and here.paired("dev-1") is None
    assert not here.revoke("dev-1")


def test_a_flood_of_requests_pushes_out_the_oldest(make_registry, clock) -> None:
    registry = make_registry()
    first = registry.request("dev-0", "c", "x")
    for n in range(1, MAX_PENDING + 5):
        clock.t += 1
        registry.request(f"dev-{n}", "c", "x")
    waiting = registry.pending()
    assert len(waiting) == MAX_PENDING
    assert first.code not in {r.code for r in waiting}
    assert len({r.code for r in waiting}) == MAX_PENDING


def test_revoking_a_waiting_device_drops_its_request(make_registry) -> None:
    registry = make_registry()
    code = registry.request("dev-1", "client-1", "x").code
    assert registry.revoke("dev-1")
    assert registry.approve(code, sign) is None


def test_the_first_instance_makes_a_shared_secret_and_the_others_read_it(clean_redis: str) -> None:
    made = iter(["first", "second"])
    assert shared_secret(clean_redis, "wren:", "auth_secret", lambda: next(made)) == ("first", True)
    assert shared_secret(clean_redis, "wren:", "auth_secret", lambda: next(made)) == ("first", False)
    assert shared_secret(clean_redis, "other:", "auth_secret", lambda: "third") == ("third", True)
