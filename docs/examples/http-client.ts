// A client of `dsh serve` in TypeScript, with Node's own `fetch`: append a turn with an
// idempotency key, retry it, read your own write, and follow the transcript live over
// Server-Sent Events.
//
//   cd docs/examples && npm ci
//   API_URL=http://127.0.0.1:18080 API_TOKEN=... npx tsx http-client.ts SESSION_ID
//
// Prints one JSON line per step; exits non-zero on any unexpected answer.

// The wire shapes this client reads (docs/http-api.md; docs/openapi.json has them all).
interface WireEvent {
  type: string;
  seq: number;
  time: number;
  data: unknown;
  surfaceOp?: "append" | { op: "replace"; startSeq: number; endSeq: number };
  sourceEventSeqs?: number[];
  ignorable?: true;
}

interface Appended {
  request_id: string;
  committed_seq: number;
  events: WireEvent[];
}

interface Surface {
  nodes: number[];
  messages: { id: string; role: string }[];
}

// RFC 9457 problem details: `code` is stable, `detail` names the offending seq and field.
interface Problem {
  status: number;
  code: string;
  detail: string;
}

type Entry = WireEvent & { kind: string };

const base = process.env.API_URL ?? "http://127.0.0.1:18080";
const token = process.env.API_TOKEN;
const session = process.argv[2] ?? `ts-${Date.now()}`;
const headers: Record<string, string> = { "content-type": "application/json" };
if (token) headers.authorization = `Bearer ${token}`;
const sessionPath = `/v1/sessions/${encodeURIComponent(session)}`;

class ApiError extends Error {
  constructor(readonly problem: Problem) {
    super(`${problem.status} ${problem.code}: ${problem.detail}`);
  }
}

async function call<T>(method: "GET" | "POST", path: string, body?: unknown, extra = {}) {
  const response = await fetch(base + path, {
    method,
    headers: { ...headers, ...extra },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer: unknown = await response.json();
  if (!response.ok) throw new ApiError(answer as Problem);
  return answer as T;
}

const hello = {
  id: "u1",
  role: "user",
  source: { kind: "user" },
  content: [{ type: "text", text: "Hi from TypeScript" }],
};
const turn = {
  events: [
    { type: "turn/start", data: { turn: 1 } },
    { type: "user/message", surfaceOp: "append", data: hello },
  ],
};
const key = { "idempotency-key": `${session}-turn-1` };
const appended = await call<Appended>("POST", `${sessionPath}/events`, turn, key);
console.log(JSON.stringify({ step: "append", committed_seq: appended.committed_seq }));

// A retry with the same key (say, after a timeout) is answered with the same events.
const retried = await call<Appended>("POST", `${sessionPath}/events`, turn, key);
if (JSON.stringify(retried) !== JSON.stringify(appended)) throw new Error("retry differed");
console.log(JSON.stringify({ step: "retry", same: true }));

// Read your own write: the surface once it has applied the seq the append returned.
const wait = `at_least=${appended.committed_seq}&timeout_ms=20000`;
const surface = await call<Surface>("GET", `${sessionPath}/surface?${wait}`);
console.log(JSON.stringify({ step: "surface", messages: surface.messages.map((m) => m.id) }));

// Follow the transcript from the start until both entries came, then stop.
async function* entries(after: number, signal: AbortSignal): AsyncGenerator<Entry> {
  const response = await fetch(`${base}${sessionPath}/transcript/stream`, {
    headers: { ...headers, "last-event-id": String(after) },
    signal,
  });
  if (!response.ok || response.body === null) {
    throw new ApiError((await response.json()) as Problem);
  }
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of response.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end).split("\n");
      buffer = buffer.slice(end + 2);
      const data = frame.find((line) => line.startsWith("data: "));
      // Idle frames are comments (": idle"); a blocked session ends with `event: blocked`.
      if (frame.includes("event: blocked") && data) {
        throw new ApiError(JSON.parse(data.slice(6)) as Problem);
      }
      if (data) yield JSON.parse(data.slice(6)) as Entry;
    }
  }
}

const controller = new AbortController();
const seen: string[] = [];
for await (const entry of entries(-1, controller.signal)) {
  seen.push(entry.type);
  if (seen.length >= 2) break;
}
controller.abort();
console.log(JSON.stringify({ step: "stream", types: seen }));
