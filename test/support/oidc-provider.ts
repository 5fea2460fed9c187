import { generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
// @ts-expect-error oidc-provider ships no type declarations
import Provider from 'oidc-provider';

/**
 * A real OpenID Provider (panva's `oidc-provider`) on 127.0.0.1, for the SSO
 * suites: discovery, authorization with PKCE, token, userinfo and JWKS are
 * the library's own, over real HTTP. Only the interaction — the login page
 * and the consent screen a person would see — is automated: the account is
 * chosen by the request's `login_hint` (Better Auth sends the address it
 * signs in with) and every requested scope is granted.
 */

export interface OidcAccount {
  /** The `sub` claim: stable per account, as the API links it. */
  sub: string;
  email: string;
  name: string;
  /** The `email_verified` claim the provider asserts. */
  emailVerified: boolean;
}

export interface TestOidcProvider {
  /** `http://127.0.0.1:<port>`: the issuer, also the origin the API must trust (TRUSTED_ORIGINS). */
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** Adds an account the provider can sign in (by its address, through `login_hint`). */
  addAccount(account: Omit<OidcAccount, 'sub'> & { sub?: string }): OidcAccount;
  /**
   * Plays the browser from the authorization URL the API handed out: follows
   * the provider's redirects through login and consent, carrying its
   * cookies, and returns the URL the provider finally sends the browser to
   * (the API's callback, with `code` and `state`, or with `error`).
   */
  authorize(authorizationUrl: string): Promise<URL>;
  /** How many requests each provider endpoint served (discovery, token, userinfo, jwks…): proof the API called it. */
  hits(path: string): number;
  close(): Promise<void>;
}

export interface OidcProviderOptions {
  /** The client's registered redirect URIs: `${AUTH_URL or API_BASE_URL}/api/auth/sso/callback/<providerId>`. */
  redirectUris: string[];
}

/** A minimal cookie jar for one origin: the provider's interaction and session cookies, by name. */
class CookieJar {
  readonly #cookies = new Map<string, string>();

  store(response: Response): void {
    for (const line of response.headers.getSetCookie()) {
      const [pair] = line.split(';');
      const at = pair!.indexOf('=');
      const name = pair!.slice(0, at).trim();
      const value = pair!.slice(at + 1).trim();
      // an expired (cleared) cookie has an empty value
      if (value === '' || /expires=Thu, 01 Jan 1970/i.test(line)) this.#cookies.delete(name);
      else this.#cookies.set(name, value);
    }
  }

  header(): string {
    return [...this.#cookies].map(([name, value]) => `${name}=${value}`).join('; ');
  }
}

export async function startOidcProvider(options: OidcProviderOptions): Promise<TestOidcProvider> {
  const accounts = new Map<string, OidcAccount>();
  const counts = new Map<string, number>();
  const clientId = `cellplane-${randomUUID().slice(0, 8)}`;
  const clientSecret = randomBytes(24).toString('base64url');
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'test-op-key', use: 'sig', alg: 'RS256' };

  let provider: any;
  const server: Server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://op').pathname;
    counts.set(path, (counts.get(path) ?? 0) + 1);
    const interaction = /^\/interaction\/([^/]+)$/.exec(path);
    if (interaction) {
      finishInteraction(provider, accounts, req, res).catch((error: unknown) => {
        res.statusCode = 500;
        res.end(String(error));
      });
      return;
    }
    provider.callback()(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  provider = new Provider(issuer, {
    clients: [
      {
        client_id: clientId,
        client_secret: clientSecret,
        redirect_uris: options.redirectUris,
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: 'client_secret_basic',
      },
    ],
    jwks: { keys: [signingKey] },
    cookies: { keys: [randomBytes(32).toString('hex')] },
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
    async findAccount(_ctx: unknown, sub: string) {
      const account = [...accounts.values()].find((candidate) => candidate.sub === sub);
      if (!account) return undefined;
      return {
        accountId: sub,
        claims: async () => ({ sub, email: account.email, email_verified: account.emailVerified, name: account.name }),
      };
    },
    features: { devInteractions: { enabled: false } },
    interactions: { url: (_ctx: unknown, interaction: { uid: string }) => `/interaction/${interaction.uid}` },
    // Better Auth sends an S256 challenge; the provider insists on one
    pkce: { required: () => true },
    // explicit lifetimes (the library warns about its defaults)
    ttl: { AccessToken: 3600, AuthorizationCode: 60, IdToken: 3600, Interaction: 600, Session: 3600, Grant: 3600, RefreshToken: 86_400 },
  });

  return {
    issuer,
    clientId,
    clientSecret,
    addAccount(account) {
      const added = { ...account, email: account.email.toLowerCase(), sub: account.sub ?? randomUUID() };
      accounts.set(added.email, added);
      return added;
    },
    async authorize(authorizationUrl) {
      const jar = new CookieJar();
      let url = new URL(authorizationUrl);
      // authorization → login → authorization → consent → authorization → the client's redirect URI
      for (let hop = 0; hop < 10; hop += 1) {
        if (url.origin !== issuer) return url;
        const response = await fetch(url, { redirect: 'manual', headers: { cookie: jar.header() } });
        jar.store(response);
        const location = response.headers.get('location');
        if (response.status < 300 || response.status >= 400 || !location) {
          throw new Error(`the provider answered ${response.status} at ${url.pathname}: ${(await response.text()).slice(0, 500)}`);
        }
        await response.body?.cancel();
        url = new URL(location, url);
      }
      throw new Error('the provider redirected more than 10 times');
    },
    hits: (path) => counts.get(path) ?? 0,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/**
 * The login and consent pages, automated: the account named by `login_hint`
 * signs in, then every scope and claim the client asked for is granted.
 * An unknown address ends the interaction with `access_denied`, as a real
 * provider's refusal would.
 */
async function finishInteraction(
  provider: any,
  accounts: Map<string, OidcAccount>,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params, session } = details;
  if (prompt.name === 'login') {
    const account = accounts.get(String(params.login_hint ?? '').toLowerCase());
    const result = account
      ? { login: { accountId: account.sub } }
      : { error: 'access_denied', error_description: 'no such account at the test provider' };
    await provider.interactionFinished(req, res, result, { mergeWithLastSubmission: false });
    return;
  }
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  const missing = prompt.details;
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, (scopes as string[]).join(' '));
  }
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
}
