import { appendFileSync } from 'node:fs';

/**
 * The secret scan. Every secret a test run creates is registered as the
 * traffic goes by: each bearer token a test sends, each service token a mint
 * returns, each value PUT to `ENV/secrets/{name}`, each literal credential of
 * an action's `trigger.auth` (and the Basic header it becomes), the server's
 * own ENCRYPTION_KEY, AUTH_SECRET and database password. Every captured log
 * line and every response body is then searched for every one of them; the
 * only place a value may appear is the response that legitimately returned it
 * (a mint response shows its token once). Full service tokens and JWTs are
 * also caught by their shape, registered or not. A finding names the secret
 * by label and shows where it was found with the value itself masked.
 */

export interface SecretFinding {
  /** What the secret was (`basic password of an action`, `minted token`, …). */
  label: string;
  /** Where it was found: `log line 12`, `response to POST /…`, `server output`. */
  where: string;
  /** The text around the hit, the secret replaced by `[SECRET]`. */
  excerpt: string;
}

interface Registered {
  label: string;
  /** The response (by sequence number) that legitimately carries it, if any. */
  origin?: number;
}

/** Shorter values, and values that are one word (`literal`), are not registered: they would match ordinary text by chance. */
export const MIN_SECRET_LENGTH = 6;
/** The marker responses show instead of a literal credential. */
const REDACTED = '[redacted]';

/** Secrets recognised by their form alone: a full service token, a JWT (a run's callback token, a signed webhook credential). */
const SHAPES: { label: string; pattern: RegExp }[] = [
  { label: 'a full service token', pattern: /cpl_[0-9A-Za-z]{36}/g },
  { label: 'a JWT', pattern: /eyJ[0-9A-Za-z_-]{8,}\.eyJ[0-9A-Za-z_-]{8,}\.[0-9A-Za-z_-]{16,}/g },
];

const CONFIG_SECRETS = ['ENCRYPTION_KEY', 'AUTH_SECRET', 'PREVIOUS_ENCRYPTION_KEY', 'CODEHOST_APP_WEBHOOK_SECRET'];
/** PEM keys: each line of the base64 body is registered (a whole PEM never survives JSON escaping intact). */
const CONFIG_KEYS = ['CODEHOST_APP_PRIVATE_KEY'];
const CONFIG_URLS = ['DATABASE_URL', 'TEST_DATABASE_URL', 'SMTP_URL'];

export class SecretScan {
  readonly #secrets = new Map<string, Registered>();
  readonly #findings: SecretFinding[] = [];
  #requests = 0;
  #responses = 0;

  /** Registers `value` (at least MIN_SECRET_LENGTH characters, not one word, not only templates) under `label`. */
  register(value: unknown, label: string, origin?: number): void {
    if (typeof value !== 'string' || value.length < MIN_SECRET_LENGTH || /^[A-Za-z]+$/.test(value) || value === REDACTED) return;
    // `{{ secrets.x }}` or `{{ parameters.x }}` holds no secret, and responses show it
    if (value.includes('{{')) return;
    if (!this.#secrets.has(value)) this.#secrets.set(value, { label, origin });
  }

  /** The secrets of a server's configuration: keys, and the password of each connection string. */
  registerConfig(env: Record<string, string | undefined>): void {
    for (const name of CONFIG_SECRETS) this.register(env[name], name);
    for (const name of CONFIG_KEYS) {
      for (const line of (env[name] ?? '').replace(/\\n/g, '\n').split('\n')) {
        if (line.trim().length >= 32 && !line.includes('-----')) this.register(line.trim(), `a line of ${name}`);
      }
    }
    for (const name of CONFIG_URLS) {
      const value = env[name];
      if (!value) continue;
      try {
        this.register(decodeURIComponent(new URL(value).password), `the password of ${name}`);
      } catch {
        // not a URL: nothing to register
      }
    }
  }

  /** A request about to be handled: registers the credentials it carries; returns its sequence number. */
  observeRequest(request: { method: string; path: string; authorization?: string | null; body?: unknown }): number {
    this.#requests += 1;
    const bearer = request.authorization?.match(/^Bearer\s+(.+)$/i)?.[1];
    this.register(bearer, 'a bearer token a test sent');
    const body = request.body;
    if (body && typeof body === 'object') {
      if (request.method === 'PUT' && /\/secrets\/[^/]+$/.test(request.path)) {
        this.register((body as { value?: unknown }).value, `the value PUT to ${request.path}`);
      }
      this.#registerTriggerCredentials(body, `${request.method} ${request.path}`, 0);
      if (request.path.startsWith('/api/auth/')) {
        const { password, newPassword, currentPassword } = body as Record<string, unknown>;
        this.register(password, `a password sent to ${request.path}`);
        this.register(newPassword, `a new password sent to ${request.path}`);
        this.register(currentPassword, `a current password sent to ${request.path}`);
      }
    }
    return this.#requests;
  }

  /**
   * A response: a service token it mints is registered with this response as
   * its one legitimate place, then the body is searched for every secret
   * registered so far (and for secret shapes, outside a mint response).
   */
  observeResponse(sequence: number, response: { method: string; path: string; text: string; body?: unknown }): void {
    this.#responses += 1;
    const minted = (response.body as { token?: unknown } | undefined)?.token;
    const mint = response.method === 'POST' && typeof minted === 'string' && minted.startsWith('cpl_');
    if (mint) this.register(minted, `a token minted by ${response.method} ${response.path}`, sequence);
    // a sign-up or sign-in returns its session token once (Better Auth), as a mint does
    const session = response.path.startsWith('/api/auth/sign-') && typeof minted === 'string' ? minted : undefined;
    if (session) this.register(session, `a session token returned by ${response.method} ${response.path}`, sequence);
    // the API's documentation shows an example token, made for the page
    const documentation = response.path === '/openapi.json' || response.path.startsWith('/docs');
    // the GitHub install URL carries its signed state (a JWT) once, as a mint returns its token
    const installState = response.method === 'POST' && response.path === '/github/install-url' ? stateOf((response.body as { url?: unknown } | undefined)?.url) : undefined;
    if (installState) this.register(installState, `an install state returned by ${response.method} ${response.path}`, sequence);
    this.#scan(response.text, `the response to ${response.method} ${response.path}`, { origin: sequence, shapes: !mint && !documentation && !installState });
  }

  /** Searches `text` for every registered secret and every secret shape. */
  scanText(text: string, where: string): void {
    this.#scan(text, where, { shapes: true });
  }

  /** Searches each line, numbered from 1 in `where`. */
  scanLines(lines: readonly string[], where: string): void {
    lines.forEach((line, index) => this.#scan(line, `${where} ${index + 1}`, { shapes: true }));
  }

  findings(): readonly SecretFinding[] {
    return this.#findings;
  }

  /** How much the scan saw: for reports, and for a test that the scan ran at all. */
  stats(): { secrets: number; requests: number; responses: number; findings: number } {
    return { secrets: this.#secrets.size, requests: this.#requests, responses: this.#responses, findings: this.#findings.length };
  }

  /** Throws, listing each finding, if any secret was found anywhere. */
  assertClean(context: string): void {
    // SECRET_SCAN_REPORT=<file>: one line per scan, to count what a run covered
    if (process.env.SECRET_SCAN_REPORT) appendFileSync(process.env.SECRET_SCAN_REPORT, `${JSON.stringify({ context, ...this.stats() })}\n`);
    if (this.#findings.length === 0) return;
    const list = this.#findings.slice(0, 20).map((f) => `- ${f.label} in ${f.where}: ${f.excerpt}`);
    const more = this.#findings.length > 20 ? [`… and ${this.#findings.length - 20} more`] : [];
    throw new Error(`secret scan (${context}): ${this.#findings.length} secret(s) leaked\n${[...list, ...more].join('\n')}`);
  }

  #scan(text: string, where: string, options: { origin?: number; shapes: boolean }): void {
    const allowedHere = (registered: Registered) => registered.origin !== undefined && registered.origin === options.origin;
    for (const [value, registered] of this.#secrets) {
      if (!allowedHere(registered) && text.includes(value)) this.#findings.push({ label: registered.label, where, excerpt: excerpt(text, value) });
    }
    if (!options.shapes) return;
    for (const { label, pattern } of SHAPES) {
      for (const match of text.matchAll(pattern)) {
        const registered = this.#secrets.get(match[0]);
        // a registered secret is reported once, by its label, above
        if (registered && !allowedHere(registered)) continue;
        this.#findings.push({ label, where, excerpt: excerpt(text, match[0]) });
      }
    }
  }

  /** Literal credentials of any action definition in a body (one, or a list of catalog items). */
  #registerTriggerCredentials(value: unknown, request: string, depth: number): void {
    if (!value || typeof value !== 'object' || depth > 4) return;
    if (Array.isArray(value)) {
      for (const item of value) this.#registerTriggerCredentials(item, request, depth + 1);
      return;
    }
    const trigger = (value as { trigger?: unknown }).trigger;
    const auth = trigger && typeof trigger === 'object' ? (trigger as { auth?: unknown }).auth : undefined;
    if (auth && typeof auth === 'object') {
      const { token, password, value: headerValue, secret, username } = auth as Record<string, unknown>;
      this.register(token, `the token of an action's trigger.auth (${request})`);
      this.register(password, `the basic password of an action's trigger.auth (${request})`);
      this.register(headerValue, `the header value of an action's trigger.auth (${request})`);
      this.register(secret, `the jwt secret of an action's trigger.auth (${request})`);
      if (typeof username === 'string' && typeof password === 'string' && !password.includes('{{') && !username.includes('{{')) {
        this.register(Buffer.from(`${username}:${password}`).toString('base64'), `the Basic credentials of an action's trigger.auth (${request})`);
      }
    }
    for (const nested of Object.values(value)) if (nested && typeof nested === 'object') this.#registerTriggerCredentials(nested, request, depth + 1);
  }
}

function excerpt(text: string, value: string): string {
  const at = text.indexOf(value);
  const before = text.slice(Math.max(0, at - 80), at);
  const after = text.slice(at + value.length, at + value.length + 80);
  return `${at > 80 ? '…' : ''}${before}[SECRET]${after}${at + value.length + 80 < text.length ? '…' : ''}`.replace(/\n/g, '\\n');
}

/** Fails if `text` (a server process's output) holds a secret of `env`'s configuration, a full service token or a JWT. */
export function assertNoSecretsIn(text: string, env: Record<string, string | undefined>, where: string): void {
  const scan = new SecretScan();
  scan.registerConfig(env);
  scan.scanText(text, where);
  scan.assertClean(where);
}

/** The `state` parameter of a URL, or undefined. */
function stateOf(url: unknown): string | undefined {
  if (typeof url !== 'string') return undefined;
  try {
    return new URL(url).searchParams.get('state') ?? undefined;
  } catch {
    return undefined;
  }
}
