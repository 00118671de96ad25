// A machine client of an organization: the TypeScript SDK v1 Client over
// Streamable HTTP with the SDK's client-credentials provider. Run by
// test/auth_ts_test.go with the URL of a Manifold that requires a token and
// the issuer's URL. Without a token, Manifold answers 401; the SDK reads the
// protected resource metadata Manifold names, finds the authorization
// server there, gets a token from it, and connects. Each step is reported as
// a JSON line on stdout.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ClientCredentialsProvider } from "@modelcontextprotocol/sdk/client/auth-extensions.js";
import { discoverOAuthProtectedResourceMetadata } from "@modelcontextprotocol/sdk/client/auth.js";

const [url, issuer] = process.argv.slice(2);
const say = (step, value) => process.stdout.write(JSON.stringify({ step, value }) + "\n");

// Discovery alone, as a client does before it has any token.
say("metadata", await discoverOAuthProtectedResourceMetadata(new URL(url)));

const provider = new ClientCredentialsProvider({
  clientId: "agent-7",
  clientSecret: "agent-7-secret",
  expectedIssuer: issuer,
  scope: "mcp",
});
const client = new Client({ name: "ts-sdk-v1-auth", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider: provider }));
say("version", client.getServerVersion()?.name);
say("token", provider.tokens()?.token_type);
const read = await client.readResource({ uri: "h+test://pub/ts-auth" });
say("read", read.contents[0].text.startsWith("for=Bearer ") ? "with a bearer token" : read.contents[0].text);
await client.close();
