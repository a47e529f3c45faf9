// The server's API as the page uses it: every request to this server only, with the API key (if one is set) as
// Authorization: Bearer; errors as ApiError carrying the server's own one-line message.

const KEY_ITEM = "ms_ocr.api_key";  // sessionStorage: the key lives as long as this tab, never on disk

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function savedKey() {
  return sessionStorage.getItem(KEY_ITEM) || "";
}

export function saveKey(key) {
  if (key) sessionStorage.setItem(KEY_ITEM, key);
  else sessionStorage.removeItem(KEY_ITEM);
}

function headers(extra) {
  const out = Object.assign({}, extra);
  const key = savedKey();
  if (key) out.Authorization = "Bearer " + key;
  return out;
}

// The message of an error answer: OpenAI's {"error": {"message"}} shape, else the status line.
async function errorOf(response) {
  let message = response.statusText || "request failed";
  try {
    const body = await response.json();
    if (body && body.error && typeof body.error.message === "string") message = body.error.message;
  } catch (e) { /* not JSON: the status text */ }
  return new ApiError(response.status, message);
}

async function send(path, options) {
  let response;
  try {
    response = await fetch(path, options);
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, "the server cannot be reached (" + e.message + ")");
  }
  if (!response.ok) throw await errorOf(response);
  return response;
}

export async function getJson(path) {
  return (await send(path, {headers: headers()})).json();
}

export async function postJson(path, body, signal) {
  const options = {method: "POST", headers: headers({"Content-Type": "application/json"}),
                   body: JSON.stringify(body), signal};
  return (await send(path, options)).json();
}

// POST raw bytes (a PDF); the Response, for JSON or a PNG.
export function postBytes(path, bytes, type, signal) {
  return send(path, {method: "POST", headers: headers({"Content-Type": type}), body: bytes, signal});
}

// A chat completion streamed as server-sent events: yields each parsed chunk ({choices, usage}); an error chunk
// of the server becomes an ApiError; ends at "data: [DONE]".
export async function* streamChat(body, signal) {
  const response = await send("/v1/chat/completions", {
    method: "POST", headers: headers({"Content-Type": "application/json", Accept: "text/event-stream"}),
    body: JSON.stringify(body), signal});
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart())
        .join("\n");
      if (!data) continue;
      if (data === "[DONE]") return;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new ApiError(chunk.error.code || 500, chunk.error.message || "the request failed");
      yield chunk;
    }
  }
  throw new ApiError(0, "the stream ended before the answer was complete");
}
