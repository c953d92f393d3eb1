"""The dashboard in headless Chromium against `parley api` and real coordinator and worker
processes: a scripted room posted to from the page, its messages, answers, floor share and
failures shown as they happen; pause, resume and a post while paused; the tools the live
workers offer; tool calls live under the message being written, then under the posted
message, and those waiting for a person approved and denied from the page; screenshots
kept.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio
from playwright.sync_api import expect, sync_playwright

from parley import processes as procs
from parley.client import Client, load_spec
from parley.shared.models import RoomSpec, ToolCallStatus
from parley.shared.settings import Settings
from tests.conftest import REDIS_URL
from tests.support.api import api_answers
from tests.support.polling import wait_until
from tests.support.rooms import investigator_room, scripted_spec
from tests.support.tool_catalog import OPS_TOOLS, SEARCH_LOGS, publish
from tests.support.tool_messages import commit_tool_message_now, incident_spec, tool_call

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

CHROMIUM = Path("/usr/bin/chromium")
# A name that resolves to 127.0.0.1, as a DNS-rebinding attacker's name does once rebound.
REBOUND = "rebound.test"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"]
# Reports every Content-Security-Policy violation of the page to the test.
CSP_LISTENER = """document.addEventListener("securitypolicyviolation", (event) =>
  window.reportCspViolation(`${event.violatedDirective} ${event.blockedURI}`));"""
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "rooms"
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
TOKEN = "dashboard-test-token"
UI_TIMEOUT_MS = 30_000
expect.set_options(timeout=UI_TIMEOUT_MS)

requires_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium; .ci/run does)")


def spec_on_queue(path: Path, queue: str) -> RoomSpec:
    """An example room whose agents take their calls from the test's queue."""
    spec = load_spec(path)
    agents = [agent.model_copy(update={"queue": queue}) for agent in spec.agents]
    return spec.model_copy(update={"agents": agents})


def example_room(processes: procs.ProcessGroup, settings: Settings, queue: str, example: str,
                 ) -> tuple[Client, str, RoomSpec]:
    """A worker and a coordinator for the test's queue, and a room of ``example``."""
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator()
    client = Client(settings)
    spec = spec_on_queue(EXAMPLES / example, queue)
    return client, client.create_room(spec), spec


def serve_api(processes: procs.ProcessGroup, log: Path, env: dict[str, str]) -> Iterator[str]:
    """`parley api` on a free port with ``env``, stopped by its PID afterwards."""
    port = procs.free_port()
    process = procs.start(procs.parley_command("api", "--host", "127.0.0.1", "--port", str(port)),
                          log, {**processes.env, **env})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: api_answers(url) or process.poll() is not None, 30, "parley api to answer")
        assert process.poll() is None, log.read_text()
        yield url
    finally:
        procs.stop(process)
        print(f"--- api log\n{log.read_text(errors='replace')[-4000:]}")


@pytest.fixture
def api_url(processes: procs.ProcessGroup, tmp_path: Path) -> Iterator[str]:
    """`parley api` on a free port with a token required."""
    yield from serve_api(processes, tmp_path / "api.log", {"PARLEY_API_TOKENS": TOKEN})


@pytest.fixture
def open_api_url(processes: procs.ProcessGroup, tmp_path: Path) -> Iterator[str]:
    """`parley api` on a free port without tokens (its log at tmp_path/api.log)."""
    yield from serve_api(processes, tmp_path / "api.log", {"PARLEY_API_TOKENS": ""})


@pytest.fixture
def csp_violations() -> list[str]:
    """The Content-Security-Policy violations the test's page reported."""
    return []


@pytest.fixture
def page(tmp_path: Path, csp_violations: list[str]):  # noqa: ANN201 - playwright's Page
    """A fresh Chromium profile's page, reporting its CSP violations; the browser is closed
    afterwards."""
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1440, "height": 1000})
        context.set_default_timeout(UI_TIMEOUT_MS)
        context.expose_binding("reportCspViolation",
                               lambda _source, violation: csp_violations.append(violation))
        context.add_init_script(CSP_LISTENER)
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.on("console", lambda message: csp_violations.append(message.text)
                    if "Content Security Policy" in message.text else None)
            yield page
        finally:
            context.close()


def save_screenshot(page, tmp_path: Path, name: str) -> Path:  # noqa: ANN001
    """A full-page screenshot under the test's tmp dir, copied to artifacts/."""
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    ARTIFACTS.mkdir(exist_ok=True)
    copy = ARTIFACTS / name
    shutil.copyfile(path, copy)
    print(f"screenshot: {path} (copy: {copy})")
    return path


def texts(page, selector: str) -> list[str]:  # noqa: ANN001
    return page.locator(selector).all_inner_texts()


@requires_chromium
def test_the_dashboard_follows_a_scripted_room_and_drives_it(processes, settings, queue,
                                                            api_url, page, tmp_path,
                                                            csp_violations):
    processes.worker("-Q", queue, "-c", "8")
    processes.coordinator()
    client = Client(settings)
    room = client.create_room(spec_on_queue(EXAMPLES / "demo.yaml", queue))

    # Without the token the API refuses, and the page says what to do. The page runs under
    # a strict Content-Security-Policy, and nothing it does breaks it (checked at the end).
    served = page.goto(f"{api_url}/#/rooms/{room}")
    assert "script-src 'self'" in served.headers["content-security-policy"]
    assert served.headers["x-frame-options"] == "DENY"
    page.locator("#error").filter(has_text="token").wait_for()
    page.fill("#token", TOKEN)
    page.click("#token-form button")
    page.locator("#room-status").filter(has_text="idle").wait_for()

    # Start the run from the page; its messages and the turns' answers appear live.
    page.fill("#post-content", "Should we ship the beta this week?")
    page.click("#post-form button")
    page.locator("#transcript li.msg.person").filter(has_text="ship the beta").wait_for()
    page.locator("#transcript li.msg.agent .sender").filter(has_text="Skeptic").first.wait_for()
    page.locator("#answers tbody tr[data-agent='Optimist'] td.score").first.wait_for()
    wait_until(lambda: client.state(room).status.value == "idle" and client.state(room).run == 1,
               60, "the first run to end")
    page.locator("#room-status").filter(has_text="idle").wait_for()

    messages = client.messages(room)
    agent_messages = [m for m in messages if m.turn is not None]
    wait_until(lambda: len(texts(page, "#transcript li.msg")) == len(messages), 20,
               "every message on the page")
    shown = texts(page, "#transcript li.msg .content")
    assert shown == [m.content for m in messages]
    assert {m.sender for m in agent_messages} <= {"Optimist", "Skeptic", "Economist", "Ethicist"}

    # The floor share: each agent's messages and share, and the Gini over them.
    page.locator("#gini").filter(has_text=f"over {len(agent_messages)} messages").wait_for()
    for name in ("Optimist", "Skeptic", "Economist", "Ethicist"):
        count = sum(m.sender == name for m in agent_messages)
        row = page.locator(f"#floor .share[data-agent='{name}']")
        assert f"({count})" in row.inner_text()
    # The last decided turn's answers with raw and adjusted scores against the threshold.
    expect(page.locator("#turn-note")).to_contain_text("threshold 0.50")
    last = client.turns(room)[-1]
    for bid in last.bids:
        if bid.status.value == "ok":
            row = page.locator(f"#answers tbody tr[data-agent='{bid.agent}']")
            expect(row.locator("td.score")).to_have_text(f"{bid.score:.2f}")
            expect(row.locator("td.adjusted")).to_have_text(f"{last.adjusted[bid.agent]:.2f}")
    # Ethicist's calls failed: its scripted error on turn 1, its prose reply on turn 5,
    # each with its status and error kind.
    page.locator("#failures tbody tr[data-agent='Ethicist']").nth(1).wait_for()
    failures = [row.split("\t") for row in texts(page, "#failures tbody tr")]
    assert [row[:4] for row in failures] == [["5", "Ethicist", "unparsed", "no_tool_call"],
                                             ["1", "Ethicist", "error", "scripted"]]
    assert "provider down" in failures[1][4]
    save_screenshot(page, tmp_path, "dashboard-room.png")

    # Pause from the page: a post waits; resume: the run goes on with it.
    page.click("#pause")
    page.locator("#room-status").filter(has_text="paused").wait_for()
    assert client.state(room).paused
    page.fill("#post-content", "What about the migration rehearsal?")
    page.click("#post-form button")
    page.locator("#room-facts").filter(has_text="1 post waiting").wait_for()
    assert client.state(room).last_seq == messages[-1].seq
    page.click("#resume")
    page.locator("#transcript li.msg.person").filter(has_text="migration rehearsal").wait_for()
    wait_until(lambda: client.state(room).run == 2 and client.state(room).status.value == "idle",
               60, "the second run to end")
    wait_until(lambda: len(texts(page, "#transcript li.msg")) == len(client.messages(room)), 20,
               "the second run's messages on the page")

    # The overview: the room with its policy and status, the coordinator holding rooms.
    page.goto(f"{api_url}/#/")
    row = page.locator(f"#rooms tbody tr[data-room='{room}']")
    row.wait_for()
    assert "launch-panel" in row.inner_text() and "bid" in row.inner_text()
    page.locator("#coordinators tbody tr").first.wait_for()
    assert "ago" in page.inner_text("#coordinators tbody")
    expect(page.locator("[data-tile='coordinators live'] .value")).to_have_text("1")
    # The workers as Celery's inspect sees them (the broker's other workers too).
    page.locator("#workers tbody tr").filter(has_text=queue).wait_for()
    page.locator("#queues tbody tr").filter(has_text=queue).wait_for()
    save_screenshot(page, tmp_path, "dashboard-overview.png")
    # Its API link goes to the schema.
    assert page.get_attribute("a.docs", "href") == "/openapi.json"
    assert csp_violations == []


def add_chunk(client: Client, room: str, turn: int, index: int, text: str) -> None:
    """A message_chunk event as a worker writing a streamed reply adds it."""
    client.redis.xadd(client.store.keys.events(room), {
        "type": "message_chunk", "turn": turn, "run": 1, "phase": 0, "agent": "Optimist",
        "index": index, "text": text, "ts": f"{time.time():.6f}"})


@requires_chromium
def test_room_content_is_text_never_markup_a_streamed_message_grows_and_cancel_ends_it(
        processes, settings, queue, api_url, page):
    processes.coordinator()  # no worker: the post is committed and turn 1 stays open
    client = Client(settings)
    spec = spec_on_queue(EXAMPLES / "demo.yaml", queue)
    spec = spec.model_copy(update={"policy": spec.policy.model_copy(update={"bid_timeout_s": 300})})
    room = client.create_room(spec)
    payload = '<img src=x onerror="window.pwned=1"><b>bold</b>'
    client.post(room, payload, sender="mallory")

    page.goto(f"{api_url}/#/rooms/{room}")
    page.fill("#token", TOKEN)
    page.click("#token-form button")
    message = page.locator("#transcript li.msg.person").first
    message.wait_for()
    expect(page.locator("#room-facts")).to_contain_text(" · 1 message · ")
    assert message.locator(".content").inner_text() == payload
    assert message.locator(".sender").inner_text() == "mallory"
    wait_until(lambda: client.state(room).turn_open, 30, "turn 1 to open")

    # A reply being written shows as it grows, its pieces joined in order, as text too.
    add_chunk(client, room, 1, 0, "Early users ")
    add_chunk(client, room, 1, 1, "<b>are</b> asking.")
    growing = page.locator("#transcript li.streaming[data-agent='Optimist'] .content")
    # Matched as the whole text, unnormalised (locator assertions need no eval, which the
    # page's Content-Security-Policy refuses).
    expect(growing).to_have_text(re.compile(r"^Early users <b>are</b> asking\.$"))
    add_chunk(client, room, 1, 0, "Again: ")  # the call made again starts its text over
    expect(growing).to_have_text(re.compile(r"^Again: $"))
    assert growing.count() == 1
    assert page.locator("#transcript img, #transcript b:not(.sender)").count() == 0
    assert page.evaluate("window.pwned === undefined")

    # Cancel from the page (after confirming): the run ends, its unfinished reply goes.
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#cancel")
    page.locator("#room-status").filter(has_text="cancelled").wait_for()
    assert client.state(room).stop_reason.value == "cancelled"
    expect(growing).to_have_count(0)


@requires_chromium
def test_a_mention_rooms_speak_queue_and_its_deletion_show_on_the_page(
        processes, settings, queue, api_url, page):
    client, room, _ = example_room(processes, settings, queue, "incident.yaml")

    page.goto(f"{api_url}/#/rooms/{room}")
    page.fill("#token", TOKEN)
    page.click("#token-form button")
    page.locator("#room-status").filter(has_text="idle").wait_for()
    page.fill("#post-sender", "oncall")
    page.fill("#post-content", "checkout-api is failing")
    page.click("#post-form button")
    # dev asks @oncall before rolling back: the run ends waiting for that person.
    page.locator("#room-status").filter(has_text="waiting_for_person").wait_for()
    expect(page.locator("#speak-queue")).to_contain_text("asked: dev → oncall")
    expect(page.locator("#speak-queue")).to_contain_text("waiting for a person")
    page.locator("#transcript li.msg.agent .sender").filter(has_text="dev").wait_for()
    # sre's turn answered the silent token: marked silent, nothing posted.
    last = client.turns(room)[-1]
    assert [(bid.agent, bid.message) for bid in last.bids] == [("sre", "(silent)")]
    sre = page.locator("#answers tbody tr[data-agent='sre']")
    expect(sre.locator("td.status")).to_have_text("silent")
    expect(sre).to_have_class(re.compile(r"\bsilent\b"))
    # The agents as the spec gives them: role and description beside each name.
    expect(page.locator("#agents li[data-agent='dev']")).to_contain_text("Developer")
    expect(page.locator("#agents li[data-agent='dev'] .description")).to_have_text(
        "Knows the code and the releases")
    assert texts(page, "#agents li b") == ["investigator", "dev", "sre"]

    # A poll begun before the deletion and answered after it (a 404) leaves the page as the
    # deletion left it, not in error.
    held: list = []
    details = re.compile(rf"/rooms/{re.escape(room)}$")
    page.route(details, lambda route: held.append(route))
    with page.expect_request(details):
        pass
    client.delete(room, force=True)
    page.locator("#room-status").filter(has_text="deleted").wait_for()
    assert held, "the poll's request was not held"
    with page.expect_event("requestfinished", lambda request: bool(details.search(request.url))):
        for route in held:
            route.continue_()
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => setTimeout(done)))")
    expect(page.locator("#conn")).to_have_text("room deleted")
    expect(page.locator("#error")).to_be_hidden()


@requires_chromium
def test_an_intent_room_shows_its_scores_against_the_threshold_in_spec_order(
        processes, settings, queue, open_api_url, page):
    client, room, spec = example_room(processes, settings, queue, "intent.yaml")

    # No token is needed here: the page shows no token box and no error.
    page.goto(f"{open_api_url}/#/rooms/{room}")
    page.locator("#room-status").filter(has_text="idle").wait_for()
    expect(page.locator("#token-form")).to_be_hidden()
    expect(page.locator("#error")).to_be_hidden()

    page.fill("#post-content", "Should we ship the beta this week?")
    page.click("#post-form button")
    wait_until(lambda: client.state(room).status.value == "idle" and client.state(room).run == 1,
               60, "the run to end")
    page.locator("#room-status").filter(has_text="idle").wait_for()

    # The last turn's intents: each score shown, with its bar and the threshold's tick.
    last = client.turns(room)[-1]
    intents = [bid for bid in last.bids if bid.kind.value == "intent"]
    assert intents and all(bid.status.value == "ok" for bid in intents)
    for bid in intents:
        row = page.locator(f"#answers tbody tr[data-agent='{bid.agent}']").first
        expect(row.locator("td.score")).to_have_text(f"{bid.score:.2f}")
        expect(row.locator("svg.bar line.threshold")).to_have_count(1)
    # In spec order, whatever order the answers arrived in.
    page.locator("#answers tbody tr[data-agent]").nth(len(intents) - 1).wait_for()
    shown = page.eval_on_selector_all("#answers tbody tr[data-agent]",
                                      "rows => rows.map(r => r.dataset.agent)")
    assert shown[:len(intents)] == [a for a in spec.agent_names if a in {b.agent for b in intents}]
    # Events tell deadlines as clock times, as `parley events` does; never epoch seconds.
    page.locator("#events li").filter(has_text="turn_opened").first.wait_for()
    events = "\n".join(texts(page, "#events li"))
    assert re.search(r"deadline=\d\d:\d\d:\d\d\.\d{3}\b", events), events
    assert not re.search(r"deadline=\d{9,}", events), events
    assert re.match(r"\d\d:\d\d:\d\d\.\d{3} ", texts(page, "#events li")[0])


@requires_chromium
def test_a_round_table_after_its_verdict_names_nobody_next_and_the_token_box_speaks_in_turn(
        processes, settings, queue, api_url, page):
    client, room, _ = example_room(processes, settings, queue, "roundtable.yaml")

    # Nothing typed yet: the page asks for a token; it says "refused" only of one given.
    page.goto(f"{api_url}/#/rooms/{room}")
    error = page.locator("#error")
    expect(error).to_have_text("This API needs a token: enter one of PARLEY_API_TOKENS above.")
    expect(page.locator("#token-form")).to_be_visible()
    page.fill("#token", "not-the-token")
    page.click("#token-form button")
    expect(error).to_have_text("The API refused the token: enter one of PARLEY_API_TOKENS above.")
    page.fill("#token", TOKEN)
    page.click("#token-form button")
    page.locator("#room-status").filter(has_text="idle").wait_for()
    expect(error).to_be_hidden()

    client.post(room, "Is the Sony WH-1000XM5 worth it?")
    wait_until(lambda: client.state(room).stop_reason is not None, 60, "the verdict")
    assert client.state(room).stop_reason.value == "verdict"
    page.locator("#room-status").filter(has_text="verdict").wait_for()
    note = page.locator("#turn-note")
    expect(note).to_contain_text("panel: 4 of 4 spoken, Moderator gave the verdict")
    assert "next" not in note.inner_text()


ATTACK = """async ([api, victim, spec]) => {
  const sent = [];
  for (const [path, init] of [
      [`/rooms?room=planted`, {method: "POST", headers: {"Content-Type": "text/plain"}, body: spec}],
      [`/rooms/${victim}/archive?remove=true`, {method: "POST"}]]) {
    // no-cors: what any page may send without asking the API first.
    try { await fetch(api + path, {...init, mode: "no-cors"}); sent.push("sent"); }
    catch (error) { sent.push(String(error)); }
  }
  return sent;
}"""


@pytest.fixture
def elsewhere() -> Iterator[str]:
    """Another origin on this machine (a page any local program may serve): a plain page
    at http://localhost:<another port>/, from a server thread of this test."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            body = b"<!doctype html><title>elsewhere</title>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@requires_chromium
def test_a_page_on_another_origin_can_neither_create_nor_remove_rooms(
        processes, settings, open_api_url, elsewhere, page, tmp_path):
    client = Client(settings)
    victim = client.create_room(load_spec(EXAMPLES / "demo.yaml"))
    page.goto(f"{elsewhere}/page.html")
    spec = load_spec(EXAMPLES / "demo.yaml").model_dump_json()
    assert page.evaluate(ATTACK, [open_api_url, victim, spec]) == ["sent", "sent"]

    log = tmp_path / "api.log"
    wait_until(lambda: f"/rooms/{victim}/archive?remove=true HTTP/1.1\\\" 403" in log.read_text(),
               10, "the API to answer the cross-site archive")
    assert "/rooms?room=planted HTTP/1.1\\\" 403" in log.read_text()
    rooms = [summary.room for summary in client.rooms(100)]
    assert victim in rooms and "planted" not in rooms


@requires_chromium
def test_a_name_rebound_onto_loopback_gets_nothing(processes, settings, open_api_url, page):
    client = Client(settings)
    room = client.create_room(load_spec(EXAMPLES / "demo.yaml"))
    port = open_api_url.rsplit(":", 1)[1]
    # A DNS-rebinding page's requests reach the API under the attacker's name.
    answer = page.goto(f"http://{REBOUND}:{port}/rooms")
    assert answer.status == 421 and room not in answer.text()
    assert f"Host '{REBOUND}:{port}' is not served" in answer.text()


@requires_chromium
def test_a_message_shows_the_tool_calls_it_was_written_from_as_text(
        settings, api_url, page, tmp_path, csp_violations):
    client = Client(settings)
    room = client.create_room(incident_spec())
    client.post(room, "Why does checkout fail?")
    forged = '<img src=x onerror="window.pwned=1">\nSRE: roll back now'
    commit_tool_message_now(functools.partial(redis.asyncio.Redis.from_url, REDIS_URL),
                            client.store.keys, room, "Investigator", "Cards are declined.", [
                                tool_call(0, result="10:02 ERROR card declined\n10:03 ERROR"),
                                tool_call(1, tool="rollback", arguments={"to": "v41"},
                                          approved_by="Ann", result=forged),
                                tool_call(2, tool="page_oncall", arguments={"team": "<b>x</b>"},
                                          status=ToolCallStatus.DENIED, approved_by="Ann",
                                          result="denied by Ann: not at night")])

    page.goto(f"{api_url}/#/rooms/{room}")
    page.fill("#token", TOKEN)
    page.click("#token-form button")
    message = page.locator("#transcript li.msg.agent")
    expect(message.locator(".content")).to_have_text("Cards are declined.")
    calls = message.locator(".tools details.tool")
    expect(calls).to_have_count(3)
    assert texts(page, "#transcript li.msg.agent .tool summary") == [
        "search_logs(service=checkout) ok 12.50 ms",
        "rollback(to=v41) ok 12.50 ms · approved by Ann",
        'page_oncall(team="<b>x</b>") denied 12.50 ms · denied by Ann']
    # The result is folded until asked for, then shown whole, as text.
    result = calls.nth(1).locator("pre.tool-result")
    expect(result).to_be_hidden()
    calls.nth(1).locator("summary").click()
    expect(result).to_have_text(re.compile(r"^<img src=x onerror=\"window\.pwned=1\">\n"
                                           r"SRE: roll back now$"))
    expect(calls.nth(1).locator("pre.tool-arguments")).to_have_text(
        re.compile(r'^\{\s*"to": "v41"\s*\}$'))
    assert page.locator("#transcript img, #transcript b:not(.sender)").count() == 0
    assert page.evaluate("window.pwned === undefined")
    save_screenshot(page, tmp_path, "dashboard-tool-calls.png")
    assert csp_violations == []


@requires_chromium
def test_the_message_being_written_shows_its_tool_calls_live(
        processes, settings, queue, api_url, page, tmp_path, csp_violations):
    # The tool takes a second; the answer after it too: each line can be seen as it stands.
    processes.worker("-Q", queue, "-c", "4", env={
        "PARLEY_WORKER_TOOLS": "tests.support.tool_modules.sample",
        "PARLEY_TEST_TOOL_SLEEP_S": "1.5"})
    processes.coordinator()
    client = Client(settings)
    wait_until(lambda: "counted" in client.tool_catalog(), 60, "the worker's offer")
    room = client.create_room(investigator_room("live-tools", queue, {
        "model": "scripted", "tools": ["counted"],
        "script": [{"tool_calls": [{"name": "counted", "arguments": {"label": "<b>x</b>"}}]},
                   {"content": "Counted.", "sleep": 2}]}))
    page.goto(f"{api_url}/#/rooms/{room}")
    page.fill("#token", TOKEN)
    page.click("#token-form button")
    expect(page.locator("#conn")).to_have_text("live")

    client.post(room, "Count")

    live = page.locator("#transcript li.msg.streaming .tool-live li.tool-call")
    expect(live).to_have_text('using counted(label="<b>x</b>")…')
    expect(live).to_have_text(re.compile(r'^used counted\(label="<b>x</b>"\) ok \d[\d.,]* ms$'))
    save_screenshot(page, tmp_path, "dashboard-tool-live.png")
    # Once posted, the message shows its tool calls from the turn record; the live line goes.
    message = page.locator("#transcript li.msg.agent:not(.streaming)")
    expect(message.locator(".content")).to_have_text("Counted.")
    expect(message.locator(".tool summary")).to_have_text(
        re.compile(r'^counted\(label="<b>x</b>"\) ok '))
    expect(page.locator("#transcript li.msg.streaming")).to_have_count(0)
    assert page.locator("#transcript b:not(.sender)").count() == 0
    assert csp_violations == []


def room_with_approvers(client: Client) -> str:
    # A room naming a tool is refused unless a live worker offers it: one is published.
    publish(client.redis, client.store.keys, "parley@ops-1", OPS_TOOLS)
    spec = scripted_spec({"SRE": [], "Investigator": []}, bid_mode="intent").model_dump()
    spec["agents"][0].update(tools=["rollback"], approve=["rollback"])
    spec["approvers"] = ["alice", "bob"]
    return client.create_room(RoomSpec.model_validate(spec))


@requires_chromium
def test_a_pending_tool_call_is_approved_from_the_page(settings: Settings, api_url, page,
                                                       tmp_path: Path, csp_violations):
    client = Client(settings)
    room = room_with_approvers(client)
    # As the SRE's worker asks, waiting for a person before it rolls back.
    client.store.approvals.request(room, "1.0.1.1.0", "SRE", "rollback",
                                   {"service": "checkout", "to": "v41"}, 1, 0, 300)

    page.goto(f"{api_url}/#/rooms/{room}")
    page.fill("#token", TOKEN)
    page.click("#token-form button")
    row = page.locator("#approvals tbody tr[data-approval='1.0.1.1.0']")
    expect(row).to_contain_text("rollback(service=checkout, to=v41)")
    expect(row).to_contain_text("SRE")
    expect(page.locator("#approvals-note")).to_have_text("approvers: alice, bob")

    # Nobody named: the page asks for the name; a name off the roster is refused by name.
    row.locator("button.approve").click()
    expect(page.locator("#error")).to_contain_text("Enter your name")
    page.fill("#approver", "mallory")
    row.locator("button.approve").click()
    expect(page.locator("#error")).to_contain_text("'mallory' is not an approver of room")
    assert client.store.approvals.pending(room)

    page.fill("#approver", "alice")
    page.fill("#approval-reason", "checked the graphs")
    row.locator("button.approve").click()
    answered = page.locator("#approvals-answered tbody tr[data-approval='1.0.1.1.0']")
    expect(answered).to_contain_text("approved")
    expect(answered).to_contain_text("alice")
    expect(answered).to_contain_text("checked the graphs")
    expect(page.locator("#approvals tbody")).to_contain_text("none pending")
    record = client.store.approvals.get(room, "1.0.1.1.0")
    assert record is not None and (record.by, record.reason) == ("alice", "checked the graphs")

    # One asked while the page is open shows up from its event, and is denied from it.
    client.store.approvals.request(room, "2.0.2.1.0", "SRE", "rollback", {"to": "v40"}, 2, 0,
                                   300)
    second = page.locator("#approvals tbody tr[data-approval='2.0.2.1.0']")
    expect(second).to_contain_text("rollback(to=v40)")
    second.locator("button.deny").click()
    expect(page.locator("#approvals-answered tbody tr[data-approval='2.0.2.1.0']")
           ).to_contain_text("denied")
    assert texts(page, "#events li b").count("tool_approval_answered") == 2
    save_screenshot(page, tmp_path, "dashboard-approvals.png")


@requires_chromium
def test_the_overview_lists_the_tools_the_live_workers_offer(processes, real_redis, keys,
                                                             open_api_url, page, tmp_path,
                                                             csp_violations):
    page.goto(f"{open_api_url}/#/")
    expect(page.locator("#tools tbody")).to_contain_text("no live worker offers tools")

    publish(real_redis, keys, "parley@ops-1", OPS_TOOLS, interval_s=60)
    publish(real_redis, keys, "parley@ops-2", [SEARCH_LOGS], interval_s=60)

    row = page.locator("#tools tbody tr[data-tool='search_logs']")
    expect(row).to_contain_text("Search a service's logs.")
    expect(row).not_to_contain_text("Returns the matching")  # the first line only
    expect(row).to_contain_text("idempotent")
    expect(row).to_contain_text("parley@ops-1, parley@ops-2")
    expect(page.locator("#tools tbody tr[data-tool='rollback']")).to_contain_text(
        "approval, queue=ops, timeout 120s")
    assert page.locator("#tools tbody tr").count() == 3
    save_screenshot(page, tmp_path, "dashboard-tools.png")
    assert csp_violations == []
