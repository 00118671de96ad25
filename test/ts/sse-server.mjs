// A 2024-11-05 MCP server as many still run: the TypeScript SDK v1 McpServer
// on its SSEServerTransport, over node:http. Run by test/sse_test.go with a
// port: GET /sse opens a session (its first event names /messages?sessionId=),
// POST /messages carries the client's messages, and GET /update?uri=U makes
// every session told of U's change. Other methods on /sse get 405, as on a
// server that predates Streamable HTTP. It prints "listening" when ready.
import http from "node:http";
import { McpServer, ResourceTemplate } from "@modelcontextprotocol/sdk/server/mcp.js";
import { SSEServerTransport } from "@modelcontextprotocol/sdk/server/sse.js";
import { SubscribeRequestSchema, UnsubscribeRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";

const port = Number(process.argv[2]);
const sessions = new Map(); // sessionId → { transport, server, subscribed }

function newServer(subscribed) {
  const server = new McpServer({ name: "ts-sse", version: "1.0.0" }, { capabilities: { resources: { subscribe: true, listChanged: true } } });
  server.resource("zero", "test://ts/0", async (uri) => ({ contents: [{ uri: uri.href, text: "ts resource 0" }] }));
  server.resource("any", new ResourceTemplate("test://ts/{id}", { list: undefined }), async (uri, { id }) => {
    if (id === "missing") {
      const err = new Error(`Resource ${uri.href} not found`);
      err.code = -32002;
      throw err;
    }
    return { contents: [{ uri: uri.href, text: `ts resource ${id}` }] };
  });
  server.tool("echo", { text: z.string() }, async ({ text }) => ({ content: [{ type: "text", text: `ts: ${text}` }] }));
  server.tool("progress", {}, async (_args, extra) => {
    const token = extra._meta?.progressToken;
    for (let i = 1; i <= 3; i++) {
      if (token !== undefined) {
        await extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, progress: i, total: 3, message: "ts" } });
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    return { content: [{ type: "text", text: "ts: done" }] };
  });
  server.server.setRequestHandler(SubscribeRequestSchema, async (req) => { subscribed.add(req.params.uri); return {}; });
  server.server.setRequestHandler(UnsubscribeRequestSchema, async (req) => { subscribed.delete(req.params.uri); return {}; });
  return server;
}

http.createServer(async (req, res) => {
  const url = new URL(req.url, `http://127.0.0.1:${port}`);
  if (url.pathname === "/sse") {
    if (req.method !== "GET") {
      res.writeHead(405, { Allow: "GET" }).end("method not allowed");
      return;
    }
    const transport = new SSEServerTransport("/messages", res);
    const subscribed = new Set();
    const server = newServer(subscribed);
    sessions.set(transport.sessionId, { transport, server, subscribed });
    res.on("close", () => sessions.delete(transport.sessionId));
    await server.connect(transport);
    return;
  }
  if (url.pathname === "/messages" && req.method === "POST") {
    const s = sessions.get(url.searchParams.get("sessionId"));
    if (!s) {
      res.writeHead(404).end("unknown session");
      return;
    }
    await s.transport.handlePostMessage(req, res);
    return;
  }
  if (url.pathname === "/update") {
    const uri = url.searchParams.get("uri");
    let told = 0;
    for (const s of sessions.values()) {
      if (s.subscribed.has(uri)) {
        await s.server.server.sendResourceUpdated({ uri });
        told++;
      }
    }
    res.writeHead(200).end(String(told));
    return;
  }
  res.writeHead(404).end("not found");
}).listen(port, "127.0.0.1", () => console.log("listening"));
