// A read-only tool on the TypeScript SDK v1 McpServer over stdio, for the
// tool cache: "codes" answers with the UTF-16 code units of its argument
// q (JavaScript keeps a lone surrogate as it came, where Go makes it
// U+FFFD) and how many times it has been called.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "ts-cached", version: "1.0.0" });
let calls = 0;
server.registerTool("codes", { inputSchema: { q: z.string() }, annotations: { readOnlyHint: true } }, async ({ q }) => {
  calls++;
  const units = Array.from({ length: q.length }, (_, i) => q.charCodeAt(i).toString(16)).join(",");
  return { content: [{ type: "text", text: `codes=${units} call=${calls}` }] };
});
await server.connect(new StdioServerTransport());
