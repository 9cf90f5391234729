"""The broker transport survives the acknowledgement of a task delivered on a connection already lost.

A late acknowledgement (``task_acks_late``) of a message whose connection the worker collected after
Redis went away raises an AttributeError inside kombu 5.7.0's Redis channel; Celery lets only the
transport's connection errors pass there, so the worker's main process died with "Unrecoverable error"
(the issue's ``'NoneType' object has no attribute 'hostname'``). These tests replay that sequence on a
real ``redis-server`` with kombu's own transport (which must still fail: the test would otherwise prove
nothing) and with the project's.
"""

from __future__ import annotations

import logging

import pytest
from kombu import Connection, Queue

from tests.prod_support import redis_server
from whestboard.jobs import celery_settings
from whestboard.jobs._celery import BROKER_TRANSPORT

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def redis_url():
    with redis_server() as url:
        yield url


def ack_after_the_connection_was_collected(url: str, transport: str | None) -> None:
    """Deliver a message, lose the connection as the worker does, then acknowledge it as Celery does."""
    conn = Connection(url, transport=transport)
    queue = Queue("whestboard-test-late-ack", routing_key="whestboard-test-late-ack")
    with conn.Producer() as producer:
        producer.publish({"n": 1}, routing_key=queue.routing_key, declare=[queue])
    channel = conn.channel()
    message = queue(channel).get(no_ack=False)
    errors = conn.connection_errors  # what Celery's Request holds: the errors it lets through
    conn.collect(socket_timeout=1)  # Consumer.on_connection_error_after_connected
    channel._pool = None  # the channel's pool went with the broken connection
    message.ack_log_error(logging.getLogger("test.late-ack"), errors)


def test_kombus_own_transport_still_raises_the_crash(redis_url):
    with pytest.raises(AttributeError, match="NoneType"):
        ack_after_the_connection_was_collected(redis_url, None)


def test_the_projects_transport_logs_the_failed_ack_and_goes_on(redis_url, caplog):
    with caplog.at_level(logging.CRITICAL, logger="test.late-ack"):
        ack_after_the_connection_was_collected(redis_url, BROKER_TRANSPORT)
    assert "Couldn't ack" in caplog.text


def test_every_celery_connection_uses_it():
    assert celery_settings(in_worker=True)["broker_transport"] == BROKER_TRANSPORT
    assert celery_settings(in_worker=False)["broker_transport"] == BROKER_TRANSPORT
