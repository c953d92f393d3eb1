"""Workers try a lost broker again at bounded intervals, not Celery's 2, 4, 6 ... 30 s."""

from __future__ import annotations

import pytest

from parley.processes import free_port
from parley.shared.settings import Settings
from parley.workers.app import BrokerConnection, app, reconnect_intervals


def intervals_until_given_up(connection: BrokerConnection, attempts: int) -> list[float]:
    """The waits between attempts to reach a broker that refuses every connection, asked
    for as Celery's consumer asks (errback and max_retries only)."""
    waits: list[float] = []
    with pytest.raises(Exception, match="refused"):
        connection.ensure_connection(lambda _exc, interval: waits.append(interval), attempts)
    return waits


def refused_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"


def test_a_lost_broker_is_tried_at_once_then_at_growing_intervals_up_to_the_maximum():
    connection = BrokerConnection(refused_url(), transport_options=reconnect_intervals(0.05))

    waits = intervals_until_given_up(connection, 8)

    assert waits == pytest.approx([0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.05, 0.05])


def test_intervals_the_caller_names_win_over_the_transport_options():
    connection = BrokerConnection(refused_url(), transport_options=reconnect_intervals(0.05))

    waits: list[float] = []
    with pytest.raises(Exception, match="refused"):
        connection.ensure_connection(lambda _exc, interval: waits.append(interval), 2,
                                     interval_start=0.03, interval_step=0, interval_max=0.03)

    assert waits == pytest.approx([0.03, 0.03])


def test_the_workers_reconnect_at_most_worker_reconnect_max_s_apart_and_never_give_up():
    connection = app.connection_for_read()

    assert isinstance(connection, BrokerConnection)
    options = app.conf.broker_transport_options
    assert options["interval_max"] == Settings().worker_reconnect_max_s
    assert options["interval_start"] == 0
    assert app.conf.broker_connection_max_retries is None


def test_settings_refuse_a_reconnect_interval_that_is_not_positive():
    with pytest.raises(ValueError, match="worker_reconnect_max_s"):
        Settings(worker_reconnect_max_s=0)
