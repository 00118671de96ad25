// A host of the 2024-11-05 HTTP+SSE transport: the TypeScript SDK v1 Client
// over its SSEClientTransport. Run by test/sse_downstream_test.go with the
// URL of a Manifold's /sse; it reports each step as a JSON line on stdout.
// After "subscribed" it waits up to 15 s for a resources/updated
// notification, which the test makes the upstream send.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const say = (step, value) => process.stdout.write(JSON.stringify({ step, value }) + "\n");

const client = new Client({ name: "ts-sdk-v1-sse", version: "1.0.0" });
let updated;
const gotUpdate = new Promise((resolve) => (updated = resolve));
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updated(n.params.uri));

await client.connect(new SSEClientTransport(new URL(process.argv[2])));
say("version", client.getServerVersion()?.name);
const list = await client.listResources();
say("resources", list.resources.map((r) => r.uri));
const read = await client.readResource({ uri: "web+test://web/0" });
say("read", read.contents[0].text);
const progress = [];
const call = await client.callTool({ name: "web_progress", arguments: {} }, undefined, { onprogress: (p) => progress.push(p.progress) });
say("call", call.content[0].text);
say("progress", progress);
await client.subscribeResource({ uri: "web+test://web/1" });
say("subscribed", true);
let timer;
const uri = await Promise.race([gotUpdate, new Promise((r) => (timer = setTimeout(() => r("timeout"), 15000)))]);
clearTimeout(timer);
say("updated", uri);
await client.close();
