// An OAuth authorization server for the tests: panva's oidc-provider, an
// independently written and certified implementation, configured as an MCP
// server's authorization server is: RFC 8414 / OpenID discovery, dynamic
// registration, PKCE, resource indicators (JWT access tokens for the one
// resource, RESOURCE), refresh tokens rotated on each use and, as
// oidc-provider does, the whole grant revoked when a spent refresh token
// comes back.
//
// The user is whoever the browser names in the X-Test-User header: the
// login and consent interactions complete at once for them. GET
// /test/stats tells what the server saw (refreshes, reuses of a spent
// refresh token, grants revoked); POST /test/revoke revokes every grant
// it has given, as a user does from their account's page at the
// server (the refresh tokens then refused). It prints its issuer URL on its first
// line once it listens on 127.0.0.1 (PORT, else a free port).
//
// Environment: RESOURCE (the protected MCP server's URL), ACCESS_TTL
// (seconds, default 3600).
import http from 'node:http';
import crypto from 'node:crypto';
import Provider, { errors } from 'oidc-provider';

const resource = process.env.RESOURCE;
const accessTTL = Number(process.env.ACCESS_TTL || 3600);
if (!resource) {
  console.error('RESOURCE is not set');
  process.exit(2);
}

const { privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
const jwk = { ...privateKey.export({ format: 'jwk' }), kid: 'test-1', alg: 'ES256', use: 'sig' };

const stats = { authorizations: 0, refreshes: 0, reused: 0, revoked: 0 };
const grants = new Set(); // the ids of the grants given, for /test/revoke

const server = http.createServer();
server.listen(Number(process.env.PORT || 0), '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    jwks: { keys: [jwk] },
    cookies: { keys: ['manifold-test-cookie-key'] },
    scopes: ['openid', 'offline_access', 'crm:read'],
    clientDefaults: { token_endpoint_auth_method: 'none', grant_types: ['authorization_code', 'refresh_token'], id_token_signed_response_alg: 'ES256' },
    features: {
      devInteractions: { enabled: false },
      registration: { enabled: true },
      revocation: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => resource,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, indicator) => {
          if (indicator !== resource) throw new errors.InvalidTarget();
          return { scope: 'crm:read', audience: resource, accessTokenTTL: accessTTL, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'ES256' } } };
        },
      },
    },
    pkce: { required: () => true },
    issueRefreshToken: (_ctx, client) => client.grantTypeAllowed('refresh_token'),
    rotateRefreshToken: () => true,
    ttl: { AccessToken: accessTTL, AuthorizationCode: 60, Grant: 86400, Interaction: 600, RefreshToken: 86400, Session: 86400 },
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    findAccount: (_ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
  });
  provider.on('grant.success', (ctx) => {
    if (ctx.oidc.params.grant_type === 'refresh_token') stats.refreshes++;
    if (ctx.oidc.params.grant_type === 'authorization_code') stats.authorizations++;
  });
  provider.on('grant.error', (_ctx, err) => {
    if (err.error_description === 'refresh token already used') stats.reused++;
  });
  provider.on('grant.revoked', () => { stats.revoked++; });
  provider.on('grant.saved', (grant) => { grants.add(grant.jti); });

  const callback = provider.callback();
  server.on('request', async (req, res) => {
    try {
      if (req.url === '/test/stats') {
        res.setHeader('Content-Type', 'application/json');
        res.end(JSON.stringify(stats));
        return;
      }
      if (req.url === '/test/revoke' && req.method === 'POST') {
        let revoked = 0;
        for (const id of grants) {
          const grant = await provider.Grant.find(id);
          if (grant) {
            await grant.destroy();
            revoked++;
          }
        }
        grants.clear();
        res.setHeader('Content-Type', 'application/json');
        res.end(JSON.stringify({ revoked }));
        return;
      }
      if (req.url.startsWith('/interaction/')) {
        await interact(provider, req, res);
        return;
      }
      callback(req, res);
    } catch (err) {
      res.statusCode = 500;
      res.end(String(err));
    }
  });
  console.log(issuer);
});

// interact completes a login or consent at once, for the user the
// browser names.
async function interact(provider, req, res) {
  const user = req.headers['x-test-user'];
  if (!user) {
    res.statusCode = 400;
    res.end('no X-Test-User');
    return;
  }
  const details = await provider.interactionDetails(req, res);
  const { prompt, params } = details;
  let result;
  if (prompt.name === 'login') {
    result = { login: { accountId: user } };
  } else {
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: details.session.accountId, clientId: params.client_id });
    if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
    for (const [indicator, scopes] of Object.entries(prompt.details.missingResourceScopes || {})) {
      grant.addResourceScope(indicator, scopes.join(' '));
    }
    result = { consent: { grantId: await grant.save() } };
  }
  await provider.interactionFinished(req, res, result, { mergeWithLastSubmission: true });
}

process.on('SIGTERM', () => process.exit(0));
