// A client of `dsh serve` in plain JavaScript (an ES module for Node 20, which runs no
// TypeScript without a compile step): append a turn with an idempotency key, retry it, read
// your own write, and follow the transcript live over Server-Sent Events.
//
//   API_URL=http://127.0.0.1:18080 API_TOKEN=... node docs/examples/http-client.mjs SESSION_ID
//
// Prints one JSON line per step; exits non-zero on any unexpected answer.

const base = process.env.API_URL ?? "http://127.0.0.1:18080";
const token = process.env.API_TOKEN;
const session = process.argv[2] ?? `js-${Date.now()}`;
const headers = { "content-type": "application/json" };
if (token) headers.authorization = `Bearer ${token}`;

async function call(method, path, body, extra = {}) {
  const response = await fetch(base + path, {
    method,
    headers: { ...headers, ...extra },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) {
    // RFC 9457 problem details: `code` is stable, `detail` names the offending seq and field.
    throw new Error(`${method} ${path}: ${response.status} ${answer.code}: ${answer.detail}`);
  }
  return answer;
}

const events = `/v1/sessions/${encodeURIComponent(session)}/events`;
const hello = {
  id: "u1",
  role: "user",
  source: { kind: "user" },
  content: [{ type: "text", text: "Hi from JavaScript" }],
};
const turn = {
  events: [
    { type: "turn/start", data: { turn: 1 } },
    { type: "user/message", surfaceOp: "append", data: hello },
  ],
};
const key = { "idempotency-key": `${session}-turn-1` };
const appended = await call("POST", events, turn, key);
console.log(JSON.stringify({ step: "append", committed_seq: appended.committed_seq }));

// A retry with the same key (say, after a timeout) is answered with the same events.
const retried = await call("POST", events, turn, key);
if (JSON.stringify(retried) !== JSON.stringify(appended)) throw new Error("retry differed");
console.log(JSON.stringify({ step: "retry", same: true }));

// Read your own write: the surface once it has applied the seq the append returned.
const surface = await call(
  "GET",
  `/v1/sessions/${encodeURIComponent(session)}/surface?at_least=${appended.committed_seq}&timeout_ms=20000`,
);
console.log(JSON.stringify({ step: "surface", messages: surface.messages.map((m) => m.id) }));

// Follow the transcript from the start until both entries came, then stop.
const controller = new AbortController();
const stream = await fetch(`${base}/v1/sessions/${encodeURIComponent(session)}/transcript/stream`, {
  headers: { ...headers, "last-event-id": "-1" },
  signal: controller.signal,
});
const decoder = new TextDecoder();
let buffer = "";
const seen = [];
for await (const chunk of stream.body) {
  buffer += decoder.decode(chunk, { stream: true });
  let end;
  while ((end = buffer.indexOf("\n\n")) >= 0) {
    const frame = buffer.slice(0, end);
    buffer = buffer.slice(end + 2);
    const data = frame.split("\n").find((line) => line.startsWith("data: "));
    if (data) seen.push(JSON.parse(data.slice(6)).type);
  }
  if (seen.length >= 2) break;
}
controller.abort();
console.log(JSON.stringify({ step: "stream", types: seen }));
