"""The worker's HTTP client for model providers: its connections spread over several pools.

httpcore's pool walks all of its connections each time a request starts or ends (and,
for each idle one, counts them all again), so a single pool holding a worker's 2,000
calls spends more CPU finding connections than litellm spends on the calls. Each request
here goes to the pool with the fewest requests in flight, the first on a tie: a quiet
worker keeps reusing the first pool's open connections, a busy one walks small pools.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable, Iterator
from typing import cast

import httpx

# With 64, a worker holding 2,000 calls still spent a fifth of its call path in the pools'
# walks; with 256 a seventh, at 10-15% less CPU a call (benchmarks/README.md).
POOLS = 256


class SpreadTransport(httpx.BaseTransport):
    """``pools`` HTTP transports with no cap on their connections; see the module."""

    def __init__(self, verify: ssl.SSLContext | str | bool = True, pools: int = POOLS) -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        # One TLS context for every pool: each would otherwise load the CA bundle again.
        context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(
            verify=verify)
        self.pools = [httpx.HTTPTransport(verify=context, limits=limits) for _ in range(pools)]
        self.in_flight = [0] * pools
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            index = min(range(len(self.pools)), key=self.in_flight.__getitem__)
            self.in_flight[index] += 1
        try:
            response = self.pools[index].handle_request(request)
        except BaseException:
            self._release(index)
            raise
        body = cast(httpx.SyncByteStream, response.stream)  # a sync transport's
        response.stream = CountedStream(body, lambda: self._release(index))
        return response

    def _release(self, index: int) -> None:
        with self._lock:
            self.in_flight[index] -= 1

    def close(self) -> None:
        for pool in self.pools:
            pool.close()


class CountedStream(httpx.SyncByteStream):
    """A response's body that tells its transport, once, when it is closed."""

    def __init__(self, stream: httpx.SyncByteStream, on_close: Callable[[], None]) -> None:
        self._stream = stream
        self._on_close: Callable[[], None] | None = on_close

    def __iter__(self) -> Iterator[bytes]:
        yield from self._stream

    def close(self) -> None:
        on_close, self._on_close = self._on_close, None
        try:
            self._stream.close()
        finally:
            if on_close is not None:
                on_close()


def provider_client(verify: ssl.SSLContext | str | bool) -> httpx.Client:
    """The client litellm sends every OpenAI-compatible call of the worker through. No
    connection cap: litellm's own client holds at most 1,000 (100 kept open), so a worker
    holding 2,000 calls would queue half of them and reopen most; the worker's pool size
    is the bound. Idle connections still close after httpx's 5 s."""
    return httpx.Client(transport=SpreadTransport(verify=verify), verify=verify,
                        follow_redirects=True, timeout=httpx.Timeout(600.0, connect=5.0))
