"""URLs as parley prints and logs them: passwords masked, everything else readable."""

from __future__ import annotations

import asyncio

import fakeredis
import pytest
import structlog

from parley.coordinator.service import Coordinator
from parley.coordinator.transport import InMemoryTransport
from parley.shared.settings import Settings, redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:secret@10.0.0.5:6379/0", "redis://:***@10.0.0.5:6379/0"),
        ("rediss://:secret@redis.internal:6380/2", "rediss://:***@redis.internal:6380/2"),
        ("redis://parley:secret@10.0.0.5:6379/0", "redis://parley:***@10.0.0.5:6379/0"),
        ("amqp://guest:secret@rabbit:5672//", "amqp://guest:***@rabbit:5672//"),
        # Percent-encoded special characters are part of the password, masked with it.
        ("redis://:p%40ss%3Aw%2Ford@host:6379/0", "redis://:***@host:6379/0"),
        # Unescaped ones too, up to the last '@', whatever they make the host look like.
        ("redis://:p@ss:w/o?r#d@host:6379/0", "redis://:***@host:6379/0"),
        ("redis://user:p@ss@host/0", "redis://user:***@host/0"),
        # An '@' later in the URL is taken for the end of the password: too much is masked.
        ("redis://:secret@host/0?client_name=ops@example", "redis://:***@example"),
        # redis-py also reads passwords from the query string.
        ("redis://host:6379/0?password=secret&db=1", "redis://host:6379/0?password=***&db=1"),
        ("unix:///run/redis.sock?db=0&password=secret", "unix:///run/redis.sock?db=0&password=***"),
        ("rediss://host/0?ssl_password=secret", "rediss://host/0?ssl_password=***"),
    ],
)
def test_a_password_in_a_url_is_masked(url, shown):
    assert redact_url(url) == shown
    assert "secret" not in redact_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "rediss://redis.internal:6380/0?ssl_cert_reqs=required",
        "redis://parley@10.0.0.5:6379/0",  # a user name alone is no secret
        "redis://user:@host:6379/0",  # an empty password: nothing to hide
        "redis://host/0?client_name=ops@example",
    ],
)
def test_a_url_without_a_password_is_unchanged(url):
    assert redact_url(url) == url


@pytest.mark.parametrize("text", ["", "not a url", "127.0.0.1:6379", "redis", "a@b: c"])
def test_text_that_is_not_a_url_is_unchanged(text):
    assert redact_url(text) == text


def test_a_coordinator_logs_where_it_connects_without_the_passwords():
    settings = Settings(redis_url="redis://:s3cret@10.0.0.5:6379/0",
                        broker_url="amqp://parley:s3cret@rabbit:5672//", key_prefix="t")
    coordinator = Coordinator(settings, InMemoryTransport(), "c1",
                              client=fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()))
    coordinator.stop()
    with structlog.testing.capture_logs() as logs:
        asyncio.run(coordinator.run())
    started = next(entry for entry in logs if entry["event"] == "coordinator_started")
    assert started["redis"] == "redis://:***@10.0.0.5:6379/0"
    assert started["broker"] == "amqp://parley:***@rabbit:5672//"
    assert "s3cret" not in repr(logs)
