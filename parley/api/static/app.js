// parley dashboard: the overview (rooms, coordinators, workers) and one room live.
// Room content is untrusted: every value from the API goes in as text (textContent),
// never as HTML.
"use strict";

const TOKEN_KEY = "parley.token";
const POLL_MS = 2000;
const STATS_EVERY = 5;  // polls
const STATS_MIN_MS = 2000;
const EVENTS_KEPT = 200;
const EVENT_TYPES = ["lease_taken", "run_started", "message_committed", "turn_opened",
  "answer_arrived", "turn_decided", "run_ended", "room_paused", "room_resumed",
  "queue_changed", "message_chunk", "room_deleted", "tool_called", "tool_result",
  "tool_approval_requested", "tool_approval_answered"];

const $ = (id) => document.getElementById(id);
let timer = null;       // the current view's poll
let source = null;      // the current view's EventSource
let view = null;        // {room, lastSeq, turn, answers: Map, chunks: Map, threshold, ...}

// ---- building DOM from untrusted values -------------------------------------------------

// el("td", {class: "num"}, "text", otherNode): strings become text nodes, never markup.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (name === "class") node.className = value;
    // Through the CSSOM: the Content-Security-Policy refuses style attributes.
    else if (name === "style") Object.assign(node.style, value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function fill(tbody, rows, empty) {
  tbody.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", {colspan: 12, class: "muted"}, empty))]));
}

function ago(ts) {
  if (ts === null || ts === undefined || !ts) return "-";
  return age(Date.now() / 1000 - ts) + " ago";
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  const s = Math.max(0, seconds);
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  if (s < 86400) return Math.floor(s / 3600) + "h";
  return Math.floor(s / 86400) + "d";
}

// A unix time as local wall-clock time to the millisecond, as `parley events` shows it.
function clock(ts) {
  const t = new Date(Number(ts) * 1000);
  const two = (n) => String(n).padStart(2, "0");
  return `${two(t.getHours())}:${two(t.getMinutes())}:${two(t.getSeconds())}.${String(t.getMilliseconds()).padStart(3, "0")}`;
}

// "1 message", "2 messages".
const counted = (n, word) => `${n} ${word}${Number(n) === 1 ? "" : "s"}`;

const num = (v, digits = 2) => (v === null || v === undefined || v === "" ? "-" : Number(v).toFixed(digits));
const usd = (v) => "$" + Number(v || 0).toFixed(4);
const tokens = (r) => Number(r.prompt_tokens || 0) + Number(r.completion_tokens || 0);

// ---- the API ------------------------------------------------------------------------------

function token() { return localStorage.getItem(TOKEN_KEY) || ""; }

async function api(path, options = {}) {
  const headers = {...(options.headers || {})};
  if (token()) headers.Authorization = "Bearer " + token();
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {...options, headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body)});
  let data = null;
  try { data = await response.json(); } catch (_) { data = null; }
  if (!response.ok) {
    const reason = (data && (data.error || data.detail)) || response.statusText;
    const error = new Error(`${options.method || "GET"} ${path}: ${response.status} ${typeof reason === "string" ? reason : JSON.stringify(reason)}`);
    error.status = response.status;
    throw error;
  }
  // An open event stream says more ("live"): a poll answered meanwhile leaves it so.
  if (!source || source.readyState !== EventSource.OPEN) setConn(true);
  return data;
}

// An EventSource cannot set headers: the token goes in the query.
function eventsUrl(path) {
  return token() ? `${path}?access_token=${encodeURIComponent(token())}` : path;
}

function setConn(ok, text) {
  const conn = $("conn");
  conn.className = "conn " + (ok ? "ok" : "down");
  conn.textContent = text || (ok ? "connected" : "disconnected");
}

function showError(error) {
  const box = $("error");
  if (!error) { box.hidden = true; return; }
  if (view && view.deleted) return;  // reads begun before the room's deletion end in 404s
  const refused = error.status === 401 || error.status === 403;
  if (refused) $("token-form").hidden = false;  // only an API that asks for a token shows its box
  box.hidden = false;
  box.textContent = !refused ? String(error.message || error)
    : token() ? "The API refused the token: enter one of PARLEY_API_TOKENS above."
    : "This API needs a token: enter one of PARLEY_API_TOKENS above.";
  setConn(false, error.status === 401 ? "token needed" : "error");
}

async function guarded(work) {
  try { await work(); showError(null); } catch (error) { showError(error); }
}

// ---- routing ------------------------------------------------------------------------------

function route() {
  clearInterval(timer);
  if (source) { source.close(); source = null; }
  const match = location.hash.match(/^#\/rooms\/(.+)$/);
  $("overview").hidden = !!match;
  $("room").hidden = !match;
  if (match) openRoom(decodeURIComponent(match[1]));
  else openOverview();
}

function crumbs(...parts) {
  $("crumbs").replaceChildren(...parts.flatMap((part) => [" / ", part]));
}

// ---- overview -----------------------------------------------------------------------------

function openOverview() {
  view = null;
  crumbs(el("span", {}, "overview"));
  const refresh = () => guarded(refreshOverview);
  refresh();
  timer = setInterval(refresh, POLL_MS);
}

// A cluster-admin's page chooses an organization ("" for every one); others see their own.
let orgChoice = "";
const orgsSeen = new Set();

function renderOrgChoice(identity, rooms) {
  const select = $("org-choice");
  if (!identity || identity.role !== "cluster-admin") { select.hidden = true; return; }
  rooms.forEach((r) => orgsSeen.add(r.organization));
  const names = ["", ...[...orgsSeen].sort()];
  if (select.options.length !== names.length) {
    select.replaceChildren(...names.map((name) => el("option", {value: name}, name || "every organization")));
    select.value = orgChoice;
    select.onchange = () => { orgChoice = select.value; guarded(refreshOverview); };
  }
  select.hidden = false;
}

async function refreshOverview() {
  const roomsPath = "/dashboard/rooms" + (orgChoice ? `?org=${encodeURIComponent(orgChoice)}` : "");
  const [rooms, coordinators, workers, tools] = await Promise.allSettled([
    api(roomsPath), api("/coordinators"), api("/workers"), api("/tools")]);
  if (rooms.status === "rejected") throw rooms.reason;
  renderOrgChoice(rooms.value.identity, rooms.value.rooms || []);
  const got = (result) => (result.status === "fulfilled" ? result.value : null);
  renderTiles(rooms.value.rooms || [], got(coordinators), got(workers));
  renderRooms(rooms.value.rooms || []);
  renderCoordinators(got(coordinators), rooms.value.rooms || []);
  renderWorkers(got(workers));
  renderTools(got(tools));
}

// The figures an operator reads first, one tile each.
function renderTiles(rooms, coordinators, workers) {
  const count = (test) => rooms.filter(test).length;
  const coordinatorRows = coordinators ? coordinators.coordinators || [] : [];
  const workerRows = workers ? workers.workers || [] : [];
  const tiles = [
    ["running", count((r) => r.status === "running" && !r.paused), "running"],
    ["paused", count((r) => r.paused), "paused"],
    ["idle", count((r) => r.status === "idle" && !r.paused), ""],
    ["failed", count((r) => r.status === "failed"), count((r) => r.status === "failed") ? "failed" : ""],
    ["coordinators live", coordinators ? coordinatorRows.filter((c) => c.live !== false).length : "?", ""],
    ["workers", workers ? workerRows.length : "?", workers && !workerRows.length ? "failed" : ""],
    ["tasks active", workerRows.reduce((n, w) => n + (Array.isArray(w.active) ? w.active.length : 0), 0), ""],
    ["tasks queued", workers ? (workers.queues || []).reduce((n, q) => n + (Number(q.depth) || 0), 0) : "?", ""],
    ["tokens", rooms.reduce((n, r) => n + tokens(r), 0), ""],
    ["cost", usd(rooms.reduce((n, r) => n + Number(r.cost_usd || 0), 0)), ""],
  ];
  $("tiles").replaceChildren(...tiles.map(([label, value, tone]) =>
    el("div", {class: `tile ${tone}`, "data-tile": label}, el("div", {class: "value"}, value), el("div", {class: "label"}, label))));
}

function renderRooms(rooms) {
  fill($("rooms").tBodies[0], rooms.map((r) => el("tr", {"data-room": r.room},
    el("td", {}, el("a", {href: "#/rooms/" + encodeURIComponent(r.room)}, r.room)),
    el("td", {}, r.name),
    el("td", {}, r.policy),
    el("td", {}, statusBadge(r.status, r.paused, r.stop_reason)),
    el("td", {class: "num"}, r.run),
    el("td", {class: "num"}, r.messages),
    el("td", {}, r.holder || "-"),
    el("td", {class: "num", title: r.lease_ttl_left_s != null ? `${num(r.lease_ttl_left_s, 1)}s left` : ""},
       r.lease_age_s != null ? age(r.lease_age_s) : "-"),
    el("td", {}, ago(r.last_activity)),
    el("td", {class: "num"}, tokens(r)),
    el("td", {class: "num"}, usd(r.cost_usd)),
  )), "no rooms yet: create one with `parley rooms create` or POST /rooms");
}

function statusBadge(status, paused, stopReason) {
  const text = paused ? `${status}, paused` : status + (stopReason && status !== "running" ? ` (${stopReason})` : "");
  return el("span", {class: `badge ${paused ? "paused" : status}`}, text);
}

// GET /coordinators: a list (or {"coordinators": [...]}) of {coordinator|id, heartbeat age,
// rooms}; rooms held are also counted from the rooms' holders.
function renderCoordinators(data, rooms) {
  const list = data ? (Array.isArray(data) ? data : data.coordinators || []) : [];
  fill($("coordinators").tBodies[0], list.map((c) => {
    const id = typeof c === "string" ? c : c.coordinator || c.id || c.name;
    const heartbeat = c.heartbeat_age_s ?? c.age_s ?? c.heartbeat_age ?? null;
    const held = Array.isArray(c.rooms) ? c.rooms : rooms.filter((r) => r.holder === id).map((r) => r.room);
    const stale = c.live === false || (c.live === undefined && heartbeat !== null && heartbeat > 30);
    return el("tr", {class: stale ? "stale" : ""},
      el("td", {}, id), el("td", {class: "num"}, heartbeat !== null ? age(heartbeat) + " ago" : "-"),
      el("td", {}, held.length ? `${held.length}: ${held.join(", ")}` : "0"));
  }), data ? "no coordinator heartbeats: start one with `parley coordinator`" : "GET /coordinators failed");
}

// GET /workers: Celery inspect. Workers as a list or a map by name, each with its active
// tasks; queue depths as a map or a list.
function renderWorkers(data) {
  if (!data) {
    fill($("workers").tBodies[0], [], "GET /workers failed");
    fill($("queues").tBodies[0], [], "-");
    return;
  }
  const workers = Array.isArray(data.workers) ? data.workers
    : Object.entries(data.workers || {}).map(([name, w]) => ({name, ...(w || {})}));
  fill($("workers").tBodies[0], workers.map((w) => {
    const active = Array.isArray(w.active) ? w.active : [];
    const count = Array.isArray(w.active) ? active.length : (w.active ?? w.active_tasks ?? 0);
    const names = active.map((t) => (t && (t.name || t.type)) || "").filter(Boolean);
    const queues = (w.queues || []).map((q) => (typeof q === "string" ? q : q.name));
    return el("tr", {}, el("td", {}, w.name || w.hostname || "?"), el("td", {class: "num"}, count),
      el("td", {}, names.length ? [...new Set(names)].join(", ") : (w.processed !== undefined ? `${w.processed} done` : "-")),
      el("td", {}, queues.join(", ") || "-"));
  }), "no worker answered the inspect: start one with `parley worker`");
  const queues = Array.isArray(data.queues) ? data.queues
    : Object.entries(data.queues || data.queue_depths || {}).map(([name, depth]) => ({name, depth}));
  fill($("queues").tBodies[0], queues.map((q) => el("tr", {},
    el("td", {}, q.name || q.queue), el("td", {class: "num"}, q.depth ?? q.messages ?? "-"))), "no queues reported");
}

// GET /tools: the catalog, each tool with its description, options and workers.
function renderTools(data) {
  const tools = data ? data.tools || [] : [];
  fill($("tools").tBodies[0], tools.map((t) => {
    const o = t.options || {};
    const options = [o.approval ? "approval" : "", o.idempotent ? "idempotent" : "",
      o.queue ? `queue=${o.queue}` : "", o.timeout_s != null ? `timeout ${o.timeout_s}s` : ""].filter(Boolean);
    return el("tr", {"data-tool": t.name},
      el("td", {}, t.name),
      el("td", {title: t.description || ""}, String(t.description || "").trim().split("\n")[0]),
      el("td", {}, options.join(", ")),
      el("td", {}, (t.workers || []).join(", ")));
  }), data ? "no live worker offers tools: start workers with PARLEY_WORKER_TOOLS or PARLEY_WORKER_MCP_CONFIG"
    : "GET /tools failed");
}

// ---- one room -----------------------------------------------------------------------------

function openRoom(room) {
  view = {room, lastSeq: 0, lastTurn: 0, turn: null, refreshing: null, polls: 0, statsAt: 0, answers: new Map(), chunks: new Map(), policy: {},
          policyState: null, scoredKinds: [], adjusted: {}, decided: null, loadingMessages: null};
  crumbs(el("a", {href: "#/"}, "overview"), el("span", {}, room));
  $("room-title").textContent = room;
  $("transcript").replaceChildren();
  $("events").replaceChildren();
  $("answers").tBodies[0].replaceChildren();
  $("turn-label").textContent = "";
  $("turn-note").textContent = "";
  guarded(() => loadMessages(view));
  guarded(() => refreshRoom(view));
  guarded(() => refreshApprovals(view));
  timer = setInterval(() => guarded(() => refreshRoom(view)), POLL_MS);
  follow(view);
}

// Every poll: the room and its newest turn. The stats (which read the room's whole log and
// turn records) every STATS_EVERY polls, and soon after a turn is decided or a run ends.
async function refreshRoom(current, withStats = current.polls++ % STATS_EVERY === 0) {
  const [details, turns, stats] = await Promise.all([
    api(roomPath(current, "")), api(`/dashboard/rooms/${encodeURIComponent(current.room)}/turns?last=1`),
    withStats ? api(`/dashboard/rooms/${encodeURIComponent(current.room)}/stats`) : null]);
  if (view !== current || current.deleted) return;
  renderDetails(details);
  if (stats) {
    current.statsAt = Date.now();
    // What the page shows of the policy comes from its record on the server: no kind is
    // named here.
    current.policy = stats.policy || {};
    current.policyState = stats.policy_state;
    current.scoredKinds = stats.scored_kinds || [];
    current.agents = stats.agents || [];
    renderAgents(current.agents);
    renderTasks(stats.tasks || []);
    renderFloor(stats.floor);
    renderUsage(stats.usage);
    renderFailures(stats.failures || []);
    showWhatIf(current);
  }
  renderTurns(current, turns);
  if (current.policyState && current.policyState.speak_queue) {
    guarded(async () => renderSpeakQueue(await api(roomPath(current, "/queue"))));
  }
}

const roomPath = (current, tail) => `/rooms/${encodeURIComponent(current.room)}${tail}`;

function renderDetails(d) {
  const status = $("room-status");
  status.replaceChildren(statusBadge(d.status, d.paused, d.stop_reason));
  const facts = [`${d.policy}`, `run ${d.run}`, `turn ${d.turn}`, counted(d.messages, "message"),
    `holder ${d.holder || "-"}` + (d.lease_ttl_left_s != null ? ` (lease ${num(d.lease_ttl_left_s, 1)}s left)` : ""),
    `last activity ${ago(d.last_activity)}`,
    counted(tokens(d), "token"), usd(d.cost_usd)];
  if (d.posts_waiting) facts.push(`${counted(d.posts_waiting, "post")} waiting`);
  if (d.last_error) facts.push(`last error: ${d.last_error}`);
  $("room-facts").textContent = facts.join(" · ");
  $("pause").disabled = !!d.paused;
  $("resume").disabled = !d.paused;
  $("cancel").disabled = d.status !== "running";
}

// ---- transcript -----------------------------------------------------------------------------

async function loadMessages(current) {
  // One fetch at a time; a message_committed meanwhile asks for another round.
  if (current.loadingMessages) { current.again = true; return; }
  current.loadingMessages = (async () => {
    do {
      current.again = false;
      const data = await api(`${roomPath(current, "/messages")}?after_seq=${current.lastSeq}`);
      if (view !== current) return;
      for (const message of Array.isArray(data) ? data : data.messages || []) addMessage(current, message);
      if (data.more) current.again = true;  // paged: the next page follows
    } while (current.again);
  })();
  try { await current.loadingMessages; } finally { current.loadingMessages = null; }
}

function addMessage(current, m) {
  if (m.seq <= current.lastSeq) return;
  current.lastSeq = m.seq;
  if (m.turn !== null && m.turn !== undefined) {
    current.lastTurn = Math.max(current.lastTurn, m.turn);
    dropChunks(current, m.turn);
  }
  const isAgent = m.turn !== null && m.turn !== undefined;
  const item = el("li", {class: isAgent ? "msg agent" : "msg person", "data-seq": m.seq},
    el("div", {class: "meta"}, el("b", {class: "sender"}, m.sender),
      el("span", {class: "muted"}, ` #${m.seq}` + (isAgent ? ` · turn ${m.turn}` : "") +
        (m.score ? ` · score ${num(m.score)}` : "") +  // only bids have scores
        (m.ts ? ` · ${new Date(m.ts * 1000).toLocaleTimeString()}` : ""))),
    el("div", {class: "content"}, m.content),
    m.tool_calls && m.tool_calls.length ? toolCalls(m.tool_calls) : null);
  appendScrolled($("transcript"), item);
}

// The tool calls a message was written from, under it: each one's tool, arguments in
// short, status, duration and who approved it, its arguments and result excerpt folded.
function toolCalls(calls) {
  return el("div", {class: "tools"}, ...calls.map((c) => el("details", {class: `tool ${c.status}`},
    el("summary", {},
      el("span", {class: "tool-name"}, c.tool), `(${argumentsText(c.arguments)})`, " ",
      el("span", {class: `badge tool-status ${c.status}`}, c.status),
      el("span", {class: "muted"}, ` ${num(c.duration_ms || 0)} ms` + (c.approved_by
        ? ` · ${c.status === "denied" ? "denied" : "approved"} by ${c.approved_by}` : ""))),
    el("div", {class: "muted"}, "arguments"),
    el("pre", {class: "tool-arguments"}, JSON.stringify(c.arguments || {}, null, 2)),
    el("div", {class: "muted"}, "result"),
    el("pre", {class: "tool-result"}, c.result || "(empty)"))));
}

// ``service=checkout, limit=50``: a plain word as it is, anything else as JSON, cut short.
function argumentsText(args) {
  const text = Object.entries(args || {}).map(([name, value]) =>
    `${name}=${typeof value === "string" && /^[\w.:/@+-]{1,40}$/.test(value) ? value : JSON.stringify(value)}`).join(", ");
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

function appendScrolled(list, item) {
  const atEnd = list.scrollTop + list.clientHeight >= list.scrollHeight - 40;
  list.append(item);
  if (atEnd) list.scrollTop = list.scrollHeight;
}

// message_chunk: a message being written, shown growing until its turn's message lands.
// A call's chunks concatenate by index; index 0 starts its text over (the call made again).
const chunkKey = (e) => `${e.turn}:${e.phase || 0}:${e.agent}`;

function addChunk(current, e) {
  if (Number(e.turn) <= current.lastTurn) return;  // replayed: its message is shown already
  const entry = streamingEntry(current, e);
  const index = Number(e.index) || 0;
  if (index === 0) entry.parts = [];
  entry.parts[index] = e.text || "";
  entry.text.textContent = entry.parts.join("");
}

// The message ``e.agent`` is writing in ``e.turn`` (and phase), shown from its first chunk
// or tool call on.
function streamingEntry(current, e) {
  let entry = current.chunks.get(chunkKey(e));
  if (!entry) {
    const text = el("div", {class: "content"});
    const tools = el("ul", {class: "tool-live"});
    const item = el("li", {class: "msg agent streaming", "data-turn": e.turn, "data-agent": e.agent},
      el("div", {class: "meta"}, el("b", {class: "sender"}, e.agent),
        el("span", {class: "muted"}, ` · turn ${e.turn} · writing…`)), text, tools);
    entry = {turn: Number(e.turn), agent: e.agent, item, text, tools, parts: [], calls: new Map()};
    current.chunks.set(chunkKey(e), entry);
    appendScrolled($("transcript"), item);
  }
  return entry;
}

// tool_called / tool_result: a line under the message being written for each of its tool
// calls, "using search_logs(service=checkout)…" until its result says how it went. A
// result's turn and phase are its call id's (<turn>.<phase>.<call>.<round>.<index>).
function addToolEvent(current, type, e) {
  const [turn, phase] = String(e.call_id || "").split(".");
  if (!(Number(turn) > current.lastTurn)) return;  // replayed: its message is shown already
  const entry = streamingEntry(current, {turn, phase: Number(phase) || 0, agent: e.agent});
  let line = entry.calls.get(e.call_id);
  if (!line) {
    line = {item: el("li", {class: "tool-call", "data-call": e.call_id}), call: `${e.tool}(…)`};
    entry.calls.set(e.call_id, line);
    entry.tools.append(line.item);
  }
  if (type === "tool_called") {
    let args = null;
    try { args = JSON.parse(e.arguments || "{}"); } catch (_) { args = null; }  // cut short
    line.call = `${e.tool}(${args ? argumentsText(args) : "…"})`;
    if (!line.status) line.item.replaceChildren(`using ${line.call}…`);
  } else {
    line.status = e.status;
    line.item.className = `tool-call ${e.status}`;
    line.item.replaceChildren(`used ${line.call} `,
      el("span", {class: `badge tool-status ${e.status}`}, e.status),
      el("span", {class: "muted"}, ` ${num(Number(e.duration_ms) || 0)} ms`));
  }
}

// Drops the growing messages of turns up to ``turn`` (their messages landed or the run
// ended), or only those ``abandoned`` picks.
function dropChunks(current, turn, abandoned = () => true) {
  for (const [key, entry] of current.chunks) {
    if (entry.turn <= turn && abandoned(entry)) { entry.item.remove(); current.chunks.delete(key); }
  }
}

// ---- live events --------------------------------------------------------------------------

function follow(current) {
  source = new EventSource(eventsUrl(roomPath(current, "/events")));
  source.onopen = () => setConn(true, "live");
  source.onerror = () => setConn(false, "reconnecting");
  for (const type of EVENT_TYPES) {
    source.addEventListener(type, (message) => {
      if (view !== current) return;
      let data = {};
      try { data = JSON.parse(message.data); } catch (_) { return; }
      onEvent(current, type, data, message.lastEventId);
    });
  }
}

function onEvent(current, type, e, id) {
  logEvent(type, e, id);
  if (type === "message_committed") { if (e.seq > current.lastSeq) guarded(() => loadMessages(current)); }
  else if (type === "message_chunk") addChunk(current, e);
  else if (type === "tool_called" || type === "tool_result") addToolEvent(current, type, e);
  else if (type === "turn_opened") startTurn(current, e);
  else if (type === "answer_arrived") {
    addAnswer(current, e);
    // A call that failed midway: its text will not be posted.
    if (e.status && e.status !== "ok") dropChunks(current, e.turn, (c) => c.turn === e.turn && c.agent === e.agent);
  } else if (type === "turn_decided") {
    decideTurn(current, e);
    refreshSoon(current);
    dropChunks(current, e.turn, (c) => c.turn < e.turn || c.agent !== e.winner || current.lastTurn >= e.turn);
  } else if (type === "queue_changed") renderSpeakQueue(e);
  else if (["run_ended", "room_paused", "room_resumed", "run_started"].includes(type)) refreshSoon(current);
  else if (type.startsWith("tool_approval_")) guarded(() => refreshApprovals(current));
  if (type === "room_deleted") {
    source.close();  // the room is gone: its stream has ended, nothing to reconnect to
    clearInterval(timer);
    clearTimeout(current.refreshing);
    current.deleted = true;
    showError(null);  // a read that met the deletion first failed on it: this says why
    setConn(false, "room deleted");
    $("room-status").replaceChildren(el("span", {class: "badge failed"}, "deleted"));
  }
  if (type === "run_ended") { dropChunks(current, Infinity); $("turn-note").textContent = `run ${e.run} ended: ${e.stop_reason || e.status}`; }
}

// Many events at once (a replay of the stream) make one refresh.
function refreshSoon(current) {
  if (current.refreshing) return;
  current.refreshing = setTimeout(() => {
    current.refreshing = null;
    // The stats read the whole room: a fast run refreshes them at most every STATS_MIN_MS.
    guarded(() => refreshRoom(current, Date.now() - current.statsAt >= STATS_MIN_MS));
  }, 250);
}

function logEvent(type, e, id) {
  const shown = (k, v) => (k === "deadline" && v !== "" && !isNaN(Number(v)) ? clock(v)
    : typeof v === "object" ? JSON.stringify(v) : v);
  const fields = Object.entries(e).filter(([k]) => !["type", "id", "ts"].includes(k))
    .map(([k, v]) => `${k}=${shown(k, v)}`).join(" ");
  const list = $("events");
  list.prepend(el("li", {title: id || ""}, el("span", {class: "muted"}, e.ts ? clock(e.ts) + " " : ""),
    el("b", {}, type), " ", fields.length > 200 ? fields.slice(0, 200) + "…" : fields));
  while (list.children.length > EVENTS_KEPT) list.lastChild.remove();
}

// ---- the open turn --------------------------------------------------------------------------

function startTurn(current, e) {
  if (current.turn !== e.turn) current.answers = new Map();
  current.turn = e.turn;
  current.decided = null;
  current.phase = e.phase || 0;
  current.deadline = e.deadline;
  renderAnswers(current);
}

function addAnswer(current, e) {
  if (current.turn !== e.turn) { current.turn = e.turn; current.answers = new Map(); current.decided = null; }
  current.answers.set(`${e.phase || 0}:${e.agent}:${e.kind}`, {...e, adjusted: null});
  renderAnswers(current);
}

function decideTurn(current, e) {
  if (current.turn !== e.turn) return;
  current.decided = e;
  renderAnswers(current);
}

// From GET /rooms/{room}/turns: the open turn (pending agents) or the last decided one, with
// its adjusted scores; the live answers keep arriving between polls.
function renderTurns(current, data) {
  const decided = Array.isArray(data) ? data : data.turns || [];
  const open = Array.isArray(data) ? null : data.open_turn;
  const last = decided[decided.length - 1];
  current.pending = open ? open.pending || [] : [];
  if (open && (current.turn === null || open.turn >= current.turn)) {
    if (current.turn !== open.turn) { current.turn = open.turn; current.answers = new Map(); current.decided = null; }
    for (const a of open.answers || []) current.answers.set(`${a.phase || 0}:${a.agent}:${a.kind}`, {...a, turn: open.turn});
    current.deadline = open.deadline;
  } else if (last && (current.turn === null || last.turn >= current.turn)) {
    if (current.turn !== last.turn) current.answers = new Map();
    current.turn = last.turn;
    current.decided = {winner: last.winner, score: last.score, stop_reason: last.stop_reason,
      trace_url: last.trace_url};
    for (const a of last.answers || []) current.answers.set(`${a.phase || 0}:${a.agent}:${a.kind}`, {...a, turn: last.turn});
  }
  renderAnswers(current);
}

function renderAnswers(current) {
  const threshold = current.policy.threshold;
  $("turn-label").textContent = current.turn === null ? ""
    : `turn ${current.turn}` + (current.decided ? " · decided" : " · open");
  const notes = [];
  if (threshold !== undefined) notes.push(`threshold ${num(threshold)}`);
  if (current.decided) {
    const d = current.decided;
    notes.push(d.winner ? `${d.winner} took the floor` + (d.score !== null && d.score !== undefined ? ` at ${num(d.score)}` : "")
      : `nobody spoke${d.stop_reason ? ` (${d.stop_reason})` : ""}`);
  } else if (current.pending && current.pending.length) {
    notes.push(`waiting on ${current.pending.join(", ")}`);
  }
  if (current.policyState && current.policyState.note) notes.push(current.policyState.note);
  $("turn-note").textContent = notes.join(" · ");
  const traced = current.decided && current.decided.trace_url;  // PARLEY_TRACE_URL
  $("turn-trace").replaceChildren(...(traced ? [el("a", {href: traced, target: "_blank", rel: "noopener"}, "trace")] : []));
  const winner = current.decided && current.decided.winner;
  const rows = [...current.answers.values()].sort((a, b) => (a.phase || 0) - (b.phase || 0)
    || specPlace(current, a.agent) - specPlace(current, b.agent)).map((a) => {
    const failed = a.status && a.status !== "ok";
    const scored = current.scoredKinds.includes(a.kind);  // other calls carry no score
    const picked = a.kind === "select" && winner ? `picked ${winner}` : null;
    const status = failed ? `${a.status}${a.error_kind ? " · " + a.error_kind : ""}` : a.silent ? "silent" : (picked || a.status || "ok");
    return el("tr", {class: `${failed ? "failed" : ""} ${a.silent ? "silent" : ""} ${winner === a.agent ? "winner" : ""}`, "data-agent": a.agent},
      el("td", {title: profile(current, a.agent)}, a.agent), el("td", {class: "muted"}, a.kind || "-"),
      el("td", {class: "num score"}, failed || !scored ? "-" : num(a.score)),
      el("td", {class: "num adjusted"}, scored && a.adjusted !== null && a.adjusted !== undefined ? num(a.adjusted) : "-"),
      el("td", {}, scored ? scoreBar(a.adjusted ?? a.score, threshold, failed) : ""),
      el("td", {class: "status"}, status),
      el("td", {class: "num"}, a.latency_ms ? Math.round(a.latency_ms) : "-"));
  });
  for (const agent of [...(current.pending || [])].sort((a, b) => specPlace(current, a) - specPlace(current, b))) {
    if (![...current.answers.values()].some((a) => a.agent === agent)) {
      rows.push(el("tr", {class: "pending"}, el("td", {}, agent), el("td", {colspan: 6, class: "muted"}, "pending…")));
    }
  }
  fill($("answers").tBodies[0], rows, "no turn yet");
}

// An agent's place in the spec (the order ties go by); callers that are no agent (the
// selector, the dispatch classifier) come first.
function specPlace(current, agent) {
  return (current.agents || []).findIndex((a) => a.name === agent);
}

// "Developer — Knows the code and the releases", as the other agents read it.
function profile(current, agent) {
  const card = (current.agents || []).find((a) => a.name === agent);
  return card ? [card.role, card.description].filter(Boolean).join(" — ") : "";
}

function renderAgents(agents) {
  $("agents").replaceChildren(...agents.map((a) => el("li", {"data-agent": a.name},
    el("b", {}, a.name), a.role ? el("span", {class: "role"}, ` ${a.role}`) : null,
    el("span", {class: "muted"}, ` · ${a.model}`),
    a.description ? el("div", {class: "description"}, a.description) : null,
    ...(a.running || []).map((t) => el("div", {class: "task muted"},
      `task ${t.id} (by ${t.worker}): ${t.instruction} [${t.status}${t.progress ? `: ${t.progress}` : ""}]`)))));
}

// The finished background tasks, newest last: each with its result or error.
function renderTasks(tasks) {
  const box = $("tasks");
  if (!box) return;
  box.hidden = !tasks.length;
  box.replaceChildren(...tasks.map((t) => el("li", {"data-task": t.id},
    el("b", {}, `${t.agent} · task ${t.id}`), el("span", {class: "muted"}, ` by ${t.worker} · ${t.status}`),
    el("div", {class: "description"}, t.instruction),
    el("pre", {class: "task-result"}, t.result || t.error))));
}

// A bar for a score in [0, 1] with a tick at the threshold.
function scoreBar(score, threshold, failed) {
  const width = 90;
  const x = Math.max(0, Math.min(1, Number(score) || 0)) * width;
  const bar = svg("svg", {width, height: 10, class: "bar"},
    svg("rect", {x: 0, y: 1, width, height: 8, class: "track"}),
    svg("rect", {x: 0, y: 1, width: failed ? 0 : x, height: 8,
      class: threshold !== undefined && score >= threshold ? "above" : "below"}));
  if (threshold !== undefined) bar.append(svg("line", {x1: threshold * width, x2: threshold * width, y1: 0, y2: 10, class: "threshold"}));
  return bar;
}

function renderSpeakQueue(q) {
  const box = $("speak-queue");
  box.hidden = false;
  const parts = [`queue: ${(q.queue || []).join(" → ") || "(empty)"}`];
  if (q.speaking) parts.unshift(`speaking: ${q.speaking}`);
  if ((q.listening || []).length) parts.push(`listening: ${q.listening.join(", ")}`);
  if ((q.asked || []).length) parts.push(`asked: ${q.asked.map((p) => p.join(" → ")).join(", ")}`);
  if (q.waiting) parts.push("waiting for a person");
  if (q.over) parts.push("discussion over");
  box.textContent = parts.join(" · ");
}

// ---- floor share, usage, failures -------------------------------------------------------------

function renderFloor(floor) {
  $("gini").textContent = `Gini ${num(floor.gini)} over ${counted(floor.total, "message")}`;
  $("floor").replaceChildren(...floor.agents.map((a) => el("div", {class: "share", "data-agent": a.agent},
    el("span", {class: "who"}, a.agent),
    el("span", {class: "track"}, el("span", {class: "fill", style: {width: `${(a.share * 100).toFixed(1)}%`}})),
    el("span", {class: "num"}, `${(a.share * 100).toFixed(0)}% (${a.messages})`))));
}

// Tokens (left scale) and cost (right scale) after each decided turn, as two polylines.
function renderUsage(usage) {
  const t = usage.totals;
  $("usage-total").textContent = `${counted(tokens(t), "token")} · ${usd(t.cost_usd)}`;
  const points = usage.points || [];
  const box = $("usage-chart");
  if (points.length < 1) { box.replaceChildren(el("p", {class: "muted"}, "no decided turn yet")); return; }
  if (!tokens(t) && !Number(t.cost_usd)) {
    box.replaceChildren(el("p", {class: "muted"}, `no tokens or cost recorded over ${counted(points.length, "turn")}`));
    return;
  }
  const W = 320, H = 110, P = 24;
  const xs = points.map((p, i) => p.ts || i), x0 = Math.min(...xs), x1 = Math.max(...xs);
  const topTokens = Math.max(...points.map(tokens)), topCost = Math.max(...points.map((p) => p.cost_usd));
  const maxTokens = Math.max(1, topTokens), maxCost = Math.max(1e-9, topCost);
  const sx = (v) => P + (x1 > x0 ? (v - x0) / (x1 - x0) : 1) * (W - 2 * P);
  const line = (f, max) => points.map((p, i) => `${sx(xs[i]).toFixed(1)},${(H - P - (f(p) / max) * (H - 2 * P)).toFixed(1)}`).join(" ");
  box.replaceChildren(svg("svg", {viewBox: `0 0 ${W} ${H}`, class: "chart"},
    svg("line", {x1: P, x2: W - P, y1: H - P, y2: H - P, class: "axis"}),
    svg("polyline", {points: line(tokens, maxTokens), class: "tokens"}),
    svg("polyline", {points: line((p) => p.cost_usd, maxCost), class: "cost"}),
    svg("text", {x: 2, y: P - 8, class: "tokens"}, counted(topTokens, "token")),
    svg("text", {x: W - 2, y: P - 8, class: "cost", "text-anchor": "end"}, usd(topCost)),
    svg("text", {x: P, y: H - 6, class: "muted"}, `turn ${points[0].turn}`),
    svg("text", {x: W - P, y: H - 6, class: "muted", "text-anchor": "end"}, `turn ${points[points.length - 1].turn}`)));
}

function renderFailures(rows) {
  fill($("failures").tBodies[0], rows.map((f) => el("tr", {"data-agent": f.agent},
    el("td", {class: "num"}, f.turn), el("td", {}, f.agent), el("td", {}, f.status),
    el("td", {}, f.error_kind || "-"), el("td", {class: "error-text"}, f.error || ""))), "none");
}

// ---- approvals ------------------------------------------------------------------------------

function callText(tool, args) {
  const shown = Object.entries(args || {}).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`);
  const text = `${tool}(${shown.join(", ")})`;
  return text.length > 160 ? text.slice(0, 158) + "…)" : text;
}

async function refreshApprovals(current) {
  const data = await api(roomPath(current, "/approvals"));
  if (view !== current) return;
  $("approvals-note").textContent = data.approvers.length ? `approvers: ${data.approvers.join(", ")}` : "no approvers";
  fill($("approvals").tBodies[0], data.approvals.map((a) => el("tr", {"data-approval": a.id},
    el("td", {}, a.id), el("td", {}, a.agent), el("td", {class: "call"}, callText(a.tool, a.arguments)),
    el("td", {class: "num"}, `${Math.round(a.waiting_s)}s`),
    el("td", {}, answerButton(current, a.id, true), answerButton(current, a.id, false)))), "none pending");
  fill($("approvals-answered").tBodies[0], data.answered.map((a) => el("tr", {"data-approval": a.id},
    el("td", {}, a.id), el("td", {class: "call"}, callText(a.tool, a.arguments)),
    el("td", {class: a.status === "approved" ? "ok-text" : "error-text"}, a.status.replace("_", " ")),
    el("td", {}, a.by || "-"), el("td", {}, a.reason || ""))), "none answered");
}

function answerButton(current, id, approve) {
  const button = el("button", {class: approve ? "approve" : "deny danger"}, approve ? "approve" : "deny");
  button.addEventListener("click", () => answerApproval(current, id, approve));
  return button;
}

// The approver's name is asked as a post's sender is: typed into the page, sent with the answer.
function answerApproval(current, id, approve) {
  const by = $("approver").value.trim();
  if (!by) {
    $("approver").focus();
    showError(new Error("Enter your name (one of the room's approvers) to answer a tool call."));
    return;
  }
  guarded(async () => {
    try {
      await api(roomPath(current, `/approvals/${encodeURIComponent(id)}`), {method: "POST",
        body: {approve, by, reason: $("approval-reason").value.trim()}});
    } catch (error) {
      // 403 here is the name, not the token: someone not on the room's approvers.
      if (error.status === 403) throw new Error(error.message);
      throw error;
    }
    $("approval-reason").value = "";
    await refreshApprovals(current);
  });
}

// ---- actions --------------------------------------------------------------------------------

// ---- what if: the recorded run decided again under the sliders' settings ------------------

// Shown for rooms whose policy has both settings (a bid room's); the sliders start at the
// room's own values, and each change asks GET /rooms/{room}/replay (no model is called).
function showWhatIf(current) {
  const {threshold, recency_penalty: penalty} = current.policy;
  const box = $("what-if");
  box.hidden = threshold === undefined || penalty === undefined;
  if (box.hidden || current.whatIf) return;
  current.whatIf = {timer: null};
  $("what-if-threshold").value = threshold;
  $("what-if-penalty").value = penalty;
  replayWhatIf(current);
}

function whatIfChanged() {
  const current = view;
  if (!current || !current.whatIf) return;
  clearTimeout(current.whatIf.timer);
  current.whatIf.timer = setTimeout(() => replayWhatIf(current), 200);
}

function replayWhatIf(current) {
  const threshold = $("what-if-threshold").value, penalty = $("what-if-penalty").value;
  $("what-if-threshold-value").textContent = threshold;
  $("what-if-penalty-value").textContent = penalty;
  const query = new URLSearchParams({threshold, recency_penalty: penalty});
  guarded(async () => {
    const replay = await api(roomPath(current, `/replay?${query}`));
    if (view === current) renderWhatIf(replay);
  });
}

function outcomeText(o) {
  const who = o.winner || "nobody";
  if (o.needs_calls) return `${who} (needs ${o.needs_calls})`;
  return o.stop ? `${who}, ends (${o.stop})` : who;
}

function renderWhatIf(replay) {
  fill($("what-if-turns").tBodies[0], replay.turns.map((t) => el("tr", {class: t.changed ? "changed" : ""},
    el("td", {}, String(t.turn)), el("td", {}, outcomeText(t.then)), el("td", {}, outcomeText(t.now)))),
    "no recorded turn");
  const s = replay.summary;
  const stop = (x) => x ? `${x.reason} at turn ${x.turn}` : "none yet";
  $("what-if-note").textContent = `run ${replay.run}`;
  $("what-if-summary").textContent = (s.first_divergence === null
    ? `no winner changes over ${s.turns_replayed} turns`
    : `first change at turn ${s.first_divergence}; replay stops there`) +
    ` · stop then ${stop(s.stop.then)}, now ${stop(s.stop.now)}`;
}

function action(name) {
  if (!view) return;
  const current = view;
  if (name === "cancel" && !confirm(`Cancel the current run of ${current.room}?`)) return;
  guarded(async () => {
    await api(roomPath(current, "/" + name), {method: "POST"});
    await refreshRoom(current);
  });
}

function setup() {
  $("token").value = token();
  $("token-form").hidden = !token();  // shown once the API asks for one
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    localStorage.setItem(TOKEN_KEY, $("token").value.trim());
    route();
  });
  for (const name of ["pause", "resume", "cancel"]) $(name).addEventListener("click", () => action(name));
  $("post-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const current = view;
    const content = $("post-content").value;
    guarded(async () => {
      await api(roomPath(current, "/messages"), {method: "POST",
        body: {sender: $("post-sender").value.trim(), content}});
      $("post-content").value = "";
    });
  });
  for (const id of ["what-if-threshold", "what-if-penalty"]) $(id).addEventListener("input", whatIfChanged);
  window.addEventListener("hashchange", route);
  route();
}

setup();
