// An agent at a search endpoint (endpoints[].catalog: search), as hosts
// embed it: the TypeScript SDK v1 Client over Streamable HTTP. Run by
// test/catalog_test.go with the search endpoint's URL and /mcp's. It lists
// the tools, finds one, calls it through call_tool and, at /mcp, by name.
// Each step is a JSON line on stdout.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [searchURL, mainURL] = process.argv.slice(2);
const say = (step, value) => process.stdout.write(JSON.stringify({ step, value }) + "\n");
const connect = async (url) => {
  const client = new Client({ name: "ts-sdk-v1-agent", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
};

const search = await connect(searchURL);
const listed = await search.listTools();
say("listed", listed.tools.map((t) => t.name).sort());
const found = await search.callTool({ name: "find_tools", arguments: { query: "simple text" } });
say("found", found.structuredContent);
const via = await search.callTool({ name: "call_tool", arguments: { name: "es_test_simple_text", arguments: {} } });
say("via", { content: via.content, isError: via.isError ?? false });
const main = await connect(mainURL);
const direct = await main.callTool({ name: "es_test_simple_text", arguments: {} });
say("direct", { content: direct.content, isError: direct.isError ?? false });
await search.close();
await main.close();
process.exit(0);
