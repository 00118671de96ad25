// An agent as hosts embed it: the TypeScript SDK v1 Client over Streamable
// HTTP, declaring URL-mode elicitation, as the caller of a bearer token.
// Run by test/oauth_list_test.go with the URL of a Manifold and the token.
// It lists tools and calls what the list shows. Asked to open a URL, it
// reports the URL and waits for a line on stdin (the test's browser
// consented) before it accepts. Each step is a JSON line on stdout.
import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema, ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, token] = process.argv.slice(2);
const say = (step, value) => process.stdout.write(JSON.stringify({ step, value }) + "\n");
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

const client = new Client({ name: "ts-sdk-v1-agent", version: "1.0.0" }, { capabilities: { elicitation: { url: {} } } });
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  say("elicit", { mode: req.params.mode, url: req.params.url });
  await lines.next();
  return { action: "accept" };
});
let changed;
const gotChange = new Promise((resolve) => (changed = resolve));
client.setNotificationHandler(ToolListChangedNotificationSchema, () => changed(true));

await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
const before = await client.listTools();
say("before", before.tools.map((t) => ({ name: t.name, title: t.title, description: t.description, inputSchema: t.inputSchema })));
const connect = await client.callTool({ name: before.tools[0].name, arguments: {} });
say("connect", connect.content[0].text);
let timer;
say("changed", await Promise.race([gotChange, new Promise((r) => (timer = setTimeout(() => r("timeout"), 20000)))]));
clearTimeout(timer);
const after = await client.listTools();
say("after", after.tools.map((t) => t.name));
const whoami = await client.callTool({ name: "crm_whoami", arguments: {} });
say("whoami", whoami.content[0].text);
await client.close();
process.exit(0);
