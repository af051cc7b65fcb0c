// An MCP server on the official TypeScript SDK that polls over SSE (SEP-1699), for
// tests/mcp_conformance.rs: events are kept in an in-memory event store, a call's stream
// opens with a priming event (an id, empty data, a retry field), and the tool
// `test_reconnection` closes its own stream mid-call and answers afterwards, so the
// answer reaches the client on the stream it resumes with Last-Event-ID.
//
//     node polling_server.mjs SDK_DIR COUNT_FILE
//
// SDK_DIR is the @modelcontextprotocol/sdk package folder (the tests pass the one that
// server-everything installed). Listens on a free loopback port and prints one line,
// `READY <port>`, once it does. COUNT_FILE holds {tool: times it ran}, rewritten on each run.

import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { randomUUID } from "node:crypto";
import { pathToFileURL } from "node:url";

const [sdkDir, countFile] = process.argv.slice(2);
const sdk = (file) => import(pathToFileURL(path.join(sdkDir, "dist/esm", file)).href);
const { McpServer } = await sdk("server/mcp.js");
const { StreamableHTTPServerTransport } = await sdk("server/streamableHttp.js");
const { isInitializeRequest } = await sdk("types.js");

const counts = {};
function count(tool) {
  counts[tool] = (counts[tool] ?? 0) + 1;
  fs.writeFileSync(countFile + ".tmp", JSON.stringify(counts));
  fs.renameSync(countFile + ".tmp", countFile);
}
count.init = () => fs.writeFileSync(countFile, "{}");

/** Every event of every stream, in order, so any stream resumes after any of its ids. */
class MemoryEventStore {
  events = [];
  async storeEvent(streamId, message) {
    const id = String(this.events.length + 1);
    this.events.push({ id, streamId, message });
    return id;
  }
  async getStreamIdForEventId(eventId) {
    return this.events.find((e) => e.id === eventId)?.streamId;
  }
  async replayEventsAfter(lastEventId, { send }) {
    const at = this.events.findIndex((e) => e.id === lastEventId);
    if (at < 0) return lastEventId;
    const stream = this.events[at].streamId;
    for (const event of this.events.slice(at + 1)) {
      if (event.streamId === stream && event.message && Object.keys(event.message).length) {
        await send(event.id, event.message);
      }
    }
    return stream;
  }
}

function mcpServer() {
  const server = new McpServer({ name: "polling-test-server", version: "1.0.0" });
  server.registerTool(
    "test_reconnection",
    { description: "Close the call's stream mid-call, then answer." },
    async (extra) => {
      count("test_reconnection");
      await new Promise((r) => setTimeout(r, 50));
      extra.closeSSEStream?.();
      await new Promise((r) => setTimeout(r, 300));
      return { content: [{ type: "text", text: "reconnected" }] };
    },
  );
  return server;
}

const transports = new Map();

async function handle(req, res) {
  // The SDK primes (and so can close) a stream only for clients that name 2025-11-25 or
  // later in each request; the conformance suite's raw POST names 2025-03-26. A server
  // that polls treats every client as able to resume: so does this one.
  const version = req.headers["mcp-protocol-version"];
  if (version && version < "2025-11-25") {
    req.headers["mcp-protocol-version"] = "2025-11-25";
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      if (req.rawHeaders[i].toLowerCase() === "mcp-protocol-version") req.rawHeaders[i + 1] = "2025-11-25";
    }
  }
  let body;
  if (req.method === "POST") {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    body = JSON.parse(Buffer.concat(chunks).toString("utf8") || "null");
  }
  const sessionId = req.headers["mcp-session-id"];
  let transport = sessionId ? transports.get(sessionId) : undefined;
  if (!transport && req.method === "POST" && isInitializeRequest(body)) {
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      eventStore: new MemoryEventStore(),
      retryInterval: 100,
      onsessioninitialized: (id) => transports.set(id, transport),
    });
    await mcpServer().connect(transport);
  }
  if (!transport) {
    res.writeHead(404, { "content-type": "application/json" });
    res.end(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32000, message: "unknown session" } }));
    return;
  }
  await transport.handleRequest(req, res, body);
}

count.init();
const listener = http.createServer((req, res) => {
  handle(req, res).catch((e) => {
    if (!res.headersSent) res.writeHead(500);
    res.end(String(e));
  });
});
listener.listen(0, "127.0.0.1", () => {
  console.log(`READY ${listener.address().port}`);
});
