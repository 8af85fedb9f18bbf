// Follows the transcript stream with fetch, not EventSource: EventSource cannot send the
// Authorization header. Resumes after the last seq seen (Last-Event-ID) when the connection
// drops; stops for good on `event: blocked` or when the signal aborts.
import { ApiError, headers } from "./api.js";

const RETRY_MS = 1000;

function parseFrame(frame) {
  const out = { event: "message", data: [], id: null };
  for (const line of frame.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "data") out.data.push(value);
    else if (field === "event") out.event = value;
    else if (field === "id") out.id = value;
  }
  return out.data.length ? { ...out, data: out.data.join("\n") } : null;
}

async function readOnce(url, lastId, signal, onEntries, onBlocked) {
  const response = await fetch(url, {
    headers: headers(lastId === null ? {} : { "Last-Event-ID": String(lastId) }),
    signal,
  });
  if (!response.ok) throw new ApiError(await response.json());
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return { lastId, blocked: false };
    buffer += value.replace(/\r\n?/g, "\n");
    const frames = buffer.split("\n\n");
    buffer = frames.pop();
    const entries = [];
    for (const frame of frames) {
      const parsed = parseFrame(frame);
      if (!parsed) continue;
      if (parsed.event === "blocked") {
        if (entries.length) onEntries(entries);
        onBlocked(JSON.parse(parsed.data));
        return { lastId, blocked: true };
      }
      if (parsed.event === "entry") {
        entries.push(JSON.parse(parsed.data));
        lastId = Number(parsed.id);
      }
    }
    if (entries.length) onEntries(entries); // one render per chunk, not per entry
  }
}

export async function follow(url, { signal, onEntries, onBlocked, onError }) {
  let lastId = null;
  while (!signal.aborted) {
    try {
      const result = await readOnce(url, lastId, signal, (entries) => {
        lastId = entries[entries.length - 1].seq;
        onEntries(entries);
      }, onBlocked);
      if (result.blocked) return;
    } catch (error) {
      if (signal.aborted) return;
      onError(error);
      if (error instanceof ApiError && error.problem.status < 500) return;
    }
    await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
  }
}
