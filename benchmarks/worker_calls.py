"""One worker process holding many LLM calls, and the worker's own CPU per call.

Calls in flight: a child process (the worker's place) starts ``--hold`` calls at once
through the worker's bid code against benchmarks/hold_server.py, which answers each after
2 s (and after 10 s: how many calls litellm's own CPU lets a process start within 2 s is
the first bound) and counts how many it held at once; it runs in a process of its own, so
its memory and CPU are not the worker's. Every call at once in the server means no call
waited for a free slot; they can all be held at once only if they all reached the server
within the answer's 2 s (``arrived_within_s``). The child reports its peak RSS and its CPU
per call, for each pool model it can run (threads; gevent when installed; asyncio: every
call a coroutine on one event loop, through ``litellm.acompletion`` with the worker's own
prompt, request and parsing code around it).

Own CPU per call: the worker's bid code against the stub over HTTP, less what
``litellm.completion`` alone costs for the very request the worker sent (same stub, the
two taken in turns), at 40 and at 560 messages.

    .venv/bin/python -m benchmarks.worker_calls --hold 2000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

from benchmarks.hold_server import HoldServer
from benchmarks.llm_cost import KEY_VARIABLE, bidder, transcript
from parley.shared.models import AgentSpec

ANSWER_AFTER_S = (2.0, 10.0)
MODELS = ("threads", "gevent", "asyncio")


def served_agent(url: str) -> AgentSpec:
    """An agent of the stub, its key lent by this process as a worker lends its own."""
    os.environ[KEY_VARIABLE] = "sk-bench"
    os.environ["PARLEY_WORKER_KEY_ENVS"] = KEY_VARIABLE
    os.environ["PARLEY_WORKER_ALLOWED_API_BASES"] = url
    from parley.shared.settings import get_settings

    get_settings.cache_clear()
    return AgentSpec(name="Served", model="openai/bench-model", api_base=url,
                     api_key_env=KEY_VARIABLE)


def thread_cpu_ms(call: Callable[[], Any]) -> float:
    """The CPU (this thread's) that ``call`` took."""
    started = time.thread_time()
    call()
    return (time.thread_time() - started) * 1000


def own_cpu(calls: int, messages: int) -> dict[str, Any]:
    """The worker's CPU per call beyond litellm's own, at ``messages`` posts: a worker's bid
    and ``litellm.completion`` sending the very request the worker sent, one after the
    other ``calls`` times (so that a change in the machine's pace meets both alike);
    medians of each."""
    import litellm

    from tests.support.openai_stub import OpenAIStub, tool_call

    with OpenAIStub(api_key="sk-bench", default=tool_call(0.8, "A stub answer."),
                    keep_alive=True) as stub:
        bid = bidder(served_agent(stub.url), transcript(messages))
        bid(0)  # warms up, and sends the request litellm alone sends again
        body = stub.requests_for("bench-model")[-1].body
        request = {key: body[key] for key in ("messages", "tools", "tool_choice", "max_tokens",
                                              "temperature") if key in body}

        def alone() -> None:
            litellm.completion(model="openai/bench-model", api_base=stub.url,
                               api_key="sk-bench", **request)

        alone()
        worker_ms, alone_ms = [], []
        for turn in range(1, calls + 1):
            worker_ms.append(thread_cpu_ms(partial(bid, turn)))
            alone_ms.append(thread_cpu_ms(alone))
    worker, litellm_ms = statistics.median(worker_ms), statistics.median(alone_ms)
    return {"messages": messages, "worker_ms": round(worker, 2),
            "litellm_ms": round(litellm_ms, 2), "own_ms": round(worker - litellm_ms, 2)}


def hold(model: str, calls: int, url: str) -> dict[str, Any]:
    """In the child: ``calls`` bids at once in ``model``'s way; its RSS and CPU."""
    if model == "gevent":
        from gevent import monkey

        monkey.patch_all()  # before anything below opens a socket
    if model == "asyncio":
        return hold_async(calls, url)
    from parley.shared.settings import get_settings
    from parley.workers.calls import Call, answer_call

    agent = served_agent(url)
    settings = get_settings()
    room = [agent, AgentSpec(name="Other", model="scripted", script=[])]
    history = transcript(40)
    answers: list[str] = []

    errors: list[str] = []

    def bid(turn: int) -> None:
        answer = answer_call(agent, room, Call(turn, 0), lambda: history, time.time() + 60,
                             settings=settings)
        answers.append(answer.status)
        if answer.error:
            errors.append(str(answer.error)[:200])

    bid(0)  # imports and warms up
    answers.clear()
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    run_at_once(model, bid, calls)
    return measured(model, calls, answers, errors, before,
                    resource.getrusage(resource.RUSAGE_SELF), started)


def measured(model: str, calls: int, answers: list[str], errors: list[str], before: Any,
             after: Any, started: float) -> dict[str, Any]:
    """One model's figures: the answers' statuses, wall time, peak RSS, CPU per call."""
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"model": model, "calls": calls, "statuses": dict(Counter(answers)),
            "errors": sorted(set(errors))[:3],
            "wall_s": round(time.perf_counter() - started, 2),
            "rss_mb": round(after.ru_maxrss / 1024), "cpu_ms_per_call": round(
                cpu_s * 1000 / calls, 2)}


def hold_async(calls: int, url: str) -> dict[str, Any]:
    """In the child: ``calls`` bids at once as coroutines on one event loop; its RSS and CPU."""
    import asyncio

    import httpx
    import litellm

    from parley.shared.settings import get_settings
    from parley.workers import llm

    # As the worker does for its threads (workers/http_pool.py): no connection cap.
    litellm.aclient_session = httpx.AsyncClient(
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
        timeout=httpx.Timeout(600.0, connect=5.0))
    agent = served_agent(url)
    settings = get_settings()
    room = [agent, AgentSpec(name="Other", model="scripted", script=[])]
    history = transcript(40)
    answers: list[str] = []
    errors: list[str] = []

    async def bid(turn: int) -> None:
        try:
            answer = await async_bid(llm, agent, room, history, settings)
            answers.append(answer)
        except Exception as error:  # noqa: BLE001 - counted, as the worker's silence would be
            answers.append("error")
            errors.append(f"{type(error).__name__}: {error}"[:200])

    async def warm_then_all_at_once() -> tuple[Any, Any, float]:
        # One loop for the warm-up and the calls: litellm's async client is bound to it.
        await bid(0)  # imports and warms up
        answers.clear()
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        await asyncio.gather(*(bid(turn) for turn in range(1, calls + 1)))
        return before, resource.getrusage(resource.RUSAGE_SELF), started

    before, after, started = asyncio.run(warm_then_all_at_once())
    return measured("asyncio", calls, answers, errors, before, after, started)


async def async_bid(llm: Any, agent: AgentSpec, room: list[AgentSpec], history: list,
                    settings: Any) -> str:
    """One bid as workers.llm.call_model builds it (credential, prompt, request), sent with
    ``litellm.acompletion``, and read as the worker reads it (usage, parse_respond)."""
    import litellm

    from parley.shared.models import DEFAULT_ORGANIZATION, CallKind
    from parley.workers.parsing import parse_respond
    from parley.workers.prompts import CALL_PROMPTS, input_budget

    credential = llm.credential_for(agent, settings, DEFAULT_ORGANIZATION)
    llm.map_model(agent.model, agent.api_base, None)
    call = CALL_PROMPTS[CallKind.BID]
    prompt = call.prompt(agent, room, history, input_budget(llm.context_window(agent),
                                                            agent.max_tokens),
                         llm.token_counter(agent.model, True), "")
    request = llm.request_kwargs(agent, prompt.messages, credential.api_key, True, call.forces,
                                 llm.output_cap(agent, None, None))
    response = await litellm.acompletion(**request, timeout=60)
    llm.response_usage(agent, response)
    parsed = parse_respond(response)
    return "unparsed" if parsed.error else "ok"


def run_at_once(model: str, bid: Any, calls: int) -> None:
    """Start every bid, then wait for all of them."""
    if model == "gevent":
        import gevent

        gevent.joinall([gevent.spawn(bid, turn) for turn in range(1, calls + 1)])
        return
    import threading

    threading.stack_size(256 * 1024)  # a bid's stack is shallow; 8 MB each is address space
    threads = [threading.Thread(target=bid, args=(turn,)) for turn in range(1, calls + 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def in_flight(model: str, calls: int, after_s: float) -> dict[str, Any]:
    """One child process holding ``calls`` calls answered ``after_s`` late; the hold
    server's count of them at once."""
    with HoldServer(after_s, "sk-bench") as server:
        done = subprocess.run([sys.executable, "-m", "benchmarks.worker_calls", "--child",
                               model, "--hold", str(calls), "--url", server.url],
                              capture_output=True, text=True, timeout=300, check=False)
        if done.returncode:
            return {"model": model, "calls": calls, "error": done.stderr[-600:]}
        held = server.held()
        burst = held["arrived"][1:]  # the child's warm-up call came first
        return {**json.loads(done.stdout.splitlines()[-1]), "answer_after_s": after_s,
                "most_in_flight": held["most_in_flight"],
                "arrived_within_s": round(burst[-1] - burst[0], 2) if burst else None}


def available(model: str) -> bool:
    """Whether this environment can run ``model``'s pool."""
    if model == "gevent":
        try:
            import gevent  # noqa: F401
        except ImportError:
            return False
    return True


def run(calls: int, held: int) -> dict[str, Any]:
    """Every measurement of this module."""
    return {"in_flight": [in_flight(model, held, after_s) for after_s in ANSWER_AFTER_S
                          for model in MODELS if available(model)],
            "own_cpu": [own_cpu(calls, messages) for messages in (40, 560)]}


def main(argv: list[str] | None = None) -> None:
    """Run from the command line and print the JSON (or, as the child, hold the calls)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--hold", type=int, default=2000)
    parser.add_argument("--child", choices=MODELS)
    parser.add_argument("--url")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(hold(args.child, args.hold, args.url)))
        return
    print(json.dumps(run(args.calls, args.hold), indent=1))


if __name__ == "__main__":
    main()
