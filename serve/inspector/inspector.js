// The inspector page: the session list, then one session's surface, live transcript and
// provenance side by side. No framework, no build step, nothing fetched from elsewhere.
import { getJson, sessionPath, setToken, token } from "./api.js";
import { eventText, messageText } from "./messages.js";
import { follow } from "./sse.js";
import { VirtualList } from "./vlist.js";

const $ = (id) => document.getElementById(id);
const SURFACE_REFRESH_MS = 1000;
// A replacement (a summary) adds no transcript entry: the session's state is polled, and the
// surface read again when the surface projection has applied more.
const STATE_POLL_MS = 3000;

let current = null; // { id, abort, surfaceTimer, poll, surfaceApplied }

function status(text) {
  $("status").textContent = text || "";
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}

function when(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) : "";
}

function reasonText(projection, reason) {
  const where = reason.seq >= 0 ? `at seq ${reason.seq}` : "at a record it could not decode";
  const source = reason.source ? ` (${reason.source})` : "";
  return `${projection}: blocked ${where}${source}: [${reason.code}] ${reason.message}`;
}

// --- the session list ---------------------------------------------------------------

async function loadSessions() {
  try {
    const list = await getJson("/v1/sessions?limit=100");
    $("blocked-list").replaceChildren(
      ...list.blocked.map((s) =>
        el("li", { class: "blocked", "data-session": s.session_id },
          el("button", { type: "button", onclick: () => openSession(s.session_id) }, s.session_id),
          el("small", {}, Object.entries(s.reasons).map(([p, r]) => `${p}: [${r.code}]`).join(" ")))),
    );
    $("recent-list").replaceChildren(
      ...list.recent.map((s) =>
        el("li", { class: s.blocked ? "blocked" : "", "data-session": s.session_id },
          el("button", { type: "button", title: when(s.time), onclick: () => openSession(s.session_id) },
            s.session_id),
          el("small", {}, `${s.applied + 1} events · ${when(s.time)}`))),
    );
    status("");
  } catch (error) {
    status(error.message);
  }
}

// --- one session --------------------------------------------------------------------

const surfaceList = new VirtualList($("surface"), renderNode);
const transcriptList = new VirtualList($("transcript"), renderEntry);
let selectedSeq = null;

function renderNode(node, index, row) {
  row.dataset.seq = node.seq;
  const marks = [];
  if (node.replaced) {
    row.classList.add("replacement");
    const [first, last] = [node.replaced[0], node.replaced[node.replaced.length - 1]];
    marks.push(`replaces ${node.replaced.length} (seq ${first}–${last})`);
  }
  if (node.empty) row.classList.add("empty");
  if (node.seq === selectedSeq) row.classList.add("selected");
  const role = node.message ? node.message.role : "";
  row.append(
    el("div", { class: "meta" }, `#${index} · seq ${node.seq} · ${node.type} · ${role} ${marks.join(" ")}`),
    el("div", { class: "text", title: messageText(node.message) },
      node.empty ? "(empty: not sent to the model)" : messageText(node.message)),
  );
  row.addEventListener("click", () => showProvenance(node.seq));
}

function renderEntry(entry, index, row) {
  row.dataset.seq = entry.seq;
  const text = eventText(entry);
  row.append(
    el("div", { class: "meta" }, `seq ${entry.seq} · ${entry.type} · ${entry.kind} · ${when(entry.time)}`),
    el("div", { class: "text", title: text }, text),
  );
}

function showBlocked(reasons) {
  const banner = $("blocked-banner");
  banner.hidden = reasons.length === 0;
  banner.textContent = reasons.join("\n");
}

async function loadState(id) {
  const state = await getJson(sessionPath(id));
  if (current?.id !== id) return;
  if (state.projections.surface.applied !== current.surfaceApplied) scheduleSurface(id);
  const reasons = Object.entries(state.projections)
    .filter(([, p]) => p.blocked)
    .map(([name, p]) => reasonText(name, p.blocked));
  showBlocked(reasons);
}

async function loadSurface(id) {
  const view = await getJson(`${sessionPath(id)}/surface/nodes`);
  if (current?.id !== id) return;
  current.surfaceApplied = view.applied;
  surfaceList.setItems(view.nodes);
  $("surface-count").textContent =
    `${view.nodes.length} nodes · applied ${view.applied} · generation ${view.replaceGeneration}/${view.contentGeneration}`;
}

// The stream ends at a block; what the transcript applied before it is read page by page.
async function loadApplied(id) {
  const items = transcriptList.items;
  let after = items.length ? items[items.length - 1].seq : -1;
  for (;;) {
    const page = await getJson(`${sessionPath(id)}/transcript/entries?after=${after}&limit=1000`);
    if (current?.id !== id || !page.entries.length) return;
    appendEntries(page.entries);
    after = page.entries[page.entries.length - 1].seq;
  }
}

function appendEntries(entries) {
  transcriptList.append(entries, true);
  $("transcript-count").textContent = `${transcriptList.items.length} entries`;
}

function scheduleSurface(id) {
  if (!current || current.surfaceTimer) return;
  current.surfaceTimer = setTimeout(() => {
    if (current?.id !== id) return;
    current.surfaceTimer = null;
    loadSurface(id).catch((error) => status(error.message));
  }, SURFACE_REFRESH_MS);
}

async function showProvenance(seq) {
  const id = current?.id;
  if (!id) return;
  selectedSeq = seq;
  surfaceList.refresh();
  const pane = $("provenance");
  try {
    const p = await getJson(`${sessionPath(id)}/provenance/${seq}`);
    const facts = [
      `seq ${p.seq} · ${p.type} · ${when(p.time)}`,
      p.sourceEventSeqs ? `cites ${p.sourceEventSeqs.join(", ")}` : "",
      p.citedBy.length ? `cited by ${p.citedBy.join(", ")}` : "",
      p.shadowedBy !== undefined ? `replaced by ${p.shadowedBy}` : "",
    ].filter(Boolean);
    const replaced = p.replaced.map((r) =>
      el("li", { "data-seq": r.seq },
        el("div", { class: "meta" }, `seq ${r.seq} · ${r.type || "?"} · ${when(r.time)}`),
        r.message
          ? el("div", { class: "message" }, messageText(r.message))
          : el("div", { class: "hint" }, "its message is in the log, not in the read models"),
        r.replaced
          ? el("button", { type: "button", onclick: () => showProvenance(r.seq) },
            `itself replaced ${r.replaced.length}: show them`)
          : ""));
    pane.replaceChildren(
      el("h4", {}, `Event ${p.seq}`),
      el("p", {}, facts.join(" · ")),
      replaced.length
        ? el("div", { id: "replaced" }, el("h4", {}, `Replaced ${replaced.length} messages`), el("ol", {}, ...replaced))
        : el("p", { class: "hint" }, "It replaced nothing."),
    );
  } catch (error) {
    pane.replaceChildren(el("p", { class: "hint" }, error.message));
  }
}

function openSession(id) {
  if (current) {
    current.abort.abort();
    clearTimeout(current.surfaceTimer);
    clearInterval(current.poll);
  }
  const abort = new AbortController();
  const poll = setInterval(() => loadState(id).catch((error) => status(error.message)), STATE_POLL_MS);
  current = { id, abort, surfaceTimer: null, poll, surfaceApplied: null };
  location.hash = `session=${encodeURIComponent(id)}`;
  for (const li of document.querySelectorAll("nav li")) {
    li.querySelector("button").classList.toggle("current", li.dataset.session === id);
  }
  $("session").hidden = false;
  $("session-title").textContent = id;
  $("provenance").replaceChildren(el("p", { class: "hint" }, "Click a surface node (a summary is marked) to see what it replaced."));
  selectedSeq = null;
  showBlocked([]);
  surfaceList.setItems([]);
  transcriptList.setItems([]);
  $("transcript-count").textContent = "";
  $("surface-count").textContent = "";
  loadState(id).catch((error) => status(error.message));
  loadSurface(id).catch((error) => status(error.message));
  follow(`${sessionPath(id)}/transcript/stream`, {
    signal: abort.signal,
    onEntries: (entries) => {
      if (current?.id !== id) return;
      appendEntries(entries);
      scheduleSurface(id);
    },
    onBlocked: (problem) => {
      if (current?.id !== id) return;
      loadState(id).catch(() => showBlocked([problem.detail]));
      loadApplied(id).catch((error) => status(error.message));
    },
    onError: (error) => status(`transcript: ${error.message}`),
  });
}

// --- start --------------------------------------------------------------------------

$("token").value = token();
$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  setToken($("token").value.trim());
  loadSessions();
  if (current) openSession(current.id);
});
$("open-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const id = $("open-id").value.trim();
  if (id) openSession(id);
});
$("refresh-list").addEventListener("click", loadSessions);
loadSessions();
const linked = new URLSearchParams(location.hash.slice(1)).get("session");
if (linked) openSession(linked);
