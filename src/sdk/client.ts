import createFetchClient, { type FetchResponse, type MaybeOptionalInit } from 'openapi-fetch';
import type { HttpMethod, MediaType, PathsWithMethod, RequiredKeysOf } from 'openapi-typescript-helpers';
import type { components, paths } from './api-types/index';
import { CellplaneError } from './errors';
import { openChangeStream, type ChangeStreamOptions, type StreamEvent } from './stream';

/**
 * The typed client: every route of the API, typed from the server's own
 * OpenAPI document (./api-types/, generated from the zod route
 * definitions), on `fetch` alone — Node, Workers, Deno and browsers.
 *
 * Each call returns the parsed success body and throws CellplaneError for
 * anything else, with the API's code, details and request id.
 */

export type Schemas = components['schemas'];
export type { paths };

export interface ClientOptions {
  /** Where the API is served, e.g. `https://api.example.com` or `http://127.0.0.1:3000`. */
  baseUrl: string;
  /** A service token (`cpl_…`) or a user session's Bearer value; none in bootstrap or local mode. */
  token?: string;
  /** Another fetch: a test's, or an embedded app's `app.fetch` (the CLI's local mode). */
  fetch?: (request: Request) => Promise<Response>;
  /** Sent with every request. */
  headers?: Record<string, string>;
}

type InitParam<Init> = RequiredKeysOf<Init> extends never ? [(Init & { [key: string]: unknown })?] : [Init & { [key: string]: unknown }];

/** The success body of `method path`. */
export type Data<P extends keyof paths, M extends HttpMethod, I = {}> = NonNullable<FetchResponse<paths[P][M & keyof paths[P]] & Record<string | number, any>, I, MediaType>['data']>;

type Call<M extends HttpMethod> = <P extends PathsWithMethod<paths, M>, I extends MaybeOptionalInit<paths[P], M>>(
  path: P,
  ...init: InitParam<I>
) => Promise<Data<P, M, I>>;

type CallWithResponse = <M extends HttpMethod, P extends PathsWithMethod<paths, M>, I extends MaybeOptionalInit<paths[P], M>>(
  method: M,
  path: P,
  ...init: InitParam<I>
) => Promise<{ data: Data<P, M, I>; response: Response }>;

type ItemOf<T> = T extends readonly (infer U)[] ? U : never;

/** GET routes that answer a JSON array and page with `X-Next-Cursor` (entities, relationships, action runs, …). */
export type ListPath = {
  [P in PathsWithMethod<paths, 'get'>]: Data<P, 'get'> extends readonly unknown[] ? P : never;
}[PathsWithMethod<paths, 'get'>];

/** Where an environment is: the organization slug, the project slug, the environment name. */
export interface EnvRef {
  org: string;
  project: string;
  env: string;
}

export const TERMINAL_RUN_STATUSES = ['succeeded', 'failed', 'cancelled'] as const;

export interface CellplaneClient {
  GET: Call<'get'>;
  POST: Call<'post'>;
  PUT: Call<'put'>;
  PATCH: Call<'patch'>;
  DELETE: Call<'delete'>;
  /** Any call, with the Response too (headers such as `Location` or `X-Next-Cursor`). */
  request: CallWithResponse;
  /** Every item of a keyset-paginated list, page after page, following `X-Next-Cursor`. */
  paginate<P extends ListPath, I extends MaybeOptionalInit<paths[P], 'get'>>(
    path: P,
    ...init: InitParam<I>
  ): AsyncGenerator<ItemOf<Data<P, 'get', I>>, void, undefined>;
  /** Triggers an action on an entity; the same `idempotencyKey` returns the same run instead of a second one. */
  trigger(
    ref: EnvRef,
    entity: string,
    action: string,
    body?: Schemas['ActionTriggerRequest'],
    options?: { idempotencyKey?: string },
  ): Promise<Schemas['ActionRun']>;
  /** Polls a run until it is succeeded, failed or cancelled (or `signal` aborts). */
  waitForRun(
    ref: EnvRef,
    runId: string,
    options?: { intervalMs?: number; signal?: AbortSignal; onUpdate?: (run: Schemas['ActionRun']) => void },
  ): Promise<Schemas['ActionRun']>;
  /** The environment's entity changes, resuming with `Last-Event-ID` after a dropped connection. */
  stream(ref: EnvRef, options?: ChangeStreamOptions): AsyncGenerator<StreamEvent, void, undefined>;
  /** Signs in with email and password (`/api/auth`); answers the session's Bearer value. */
  signIn(email: string, password: string): Promise<{ token: string; user: { id: string; email: string; name: string } }>;
  readonly baseUrl: string;
}

export function createClient(options: ClientOptions): CellplaneClient {
  const baseUrl = options.baseUrl.replace(/\/+$/, '');
  const headers: Record<string, string> = { ...options.headers };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  const fetchImpl = options.fetch ?? ((request: Request) => globalThis.fetch(request));
  const raw = createFetchClient<paths>({ baseUrl, headers, fetch: fetchImpl });

  const request = (async (method: HttpMethod, path: string, init: Record<string, any> = {}) => {
    const describe = { method: method.toUpperCase(), url: fillPath(path, init.params?.path) };
    let result: { data?: unknown; error?: unknown; response: Response };
    try {
      result = await (raw.request as any)(method, path, init);
    } catch (error) {
      throw CellplaneError.network(describe, error);
    }
    const { response } = result;
    if (!response.ok) throw CellplaneError.fromBody(response, result.error, describe);
    return { data: result.data, response };
  }) as unknown as CallWithResponse;

  const data = (method: HttpMethod) => (async (path: string, init?: Record<string, any>) => (await (request as any)(method, path, init)).data) as any;

  async function* paginate(path: string, init: Record<string, any> = {}) {
    let cursor: string | undefined;
    do {
      const query = { ...init.params?.query, ...(cursor === undefined ? {} : { cursor }) };
      const { data: page, response } = await (request as any)('get', path, { ...init, params: { ...init.params, query } });
      for (const item of page as unknown[]) yield item;
      cursor = response.headers.get('x-next-cursor') ?? undefined;
    } while (cursor !== undefined);
  }

  const envPath = (ref: EnvRef) => ({ o: ref.org, p: ref.project, envName: ref.env });

  const client: CellplaneClient = {
    baseUrl,
    GET: data('get'),
    POST: data('post'),
    PUT: data('put'),
    PATCH: data('patch'),
    DELETE: data('delete'),
    request,
    paginate: paginate as CellplaneClient['paginate'],
    trigger: (ref, entity, action, body, triggerOptions) =>
      client.POST('/{o}/{p}/envs/{envName}/entities/{name}/actions/{actionName}', {
        params: {
          path: { ...envPath(ref), name: entity, actionName: action },
          header: triggerOptions?.idempotencyKey === undefined ? {} : { 'idempotency-key': triggerOptions.idempotencyKey },
        },
        body: body ?? {},
      }),
    async waitForRun(ref, runId, waitOptions = {}) {
      const intervalMs = waitOptions.intervalMs ?? 1000;
      for (;;) {
        const run = await client.GET('/{o}/{p}/envs/{envName}/action-runs/{id}', {
          params: { path: { ...envPath(ref), id: runId } },
          signal: waitOptions.signal,
        });
        waitOptions.onUpdate?.(run);
        if ((TERMINAL_RUN_STATUSES as readonly string[]).includes(run.status)) return run;
        await sleep(intervalMs, waitOptions.signal);
      }
    },
    stream: (ref, streamOptions) => openChangeStream({ baseUrl, headers, fetch: fetchImpl }, ref, streamOptions),
    async signIn(email, password) {
      const { data: body, response } = await client.request('post', '/api/auth/sign-in/email', { body: { email, password } });
      const token = response.headers.get('set-auth-token');
      if (!token) {
        throw new CellplaneError({
          status: response.status,
          code: 'no_session_token',
          message: 'sign-in answered without a set-auth-token header; is this a Cellplane API?',
          request: { method: 'POST', url: '/api/auth/sign-in/email' },
        });
      }
      const user = (body as { user: { id: string; email: string; name: string } }).user;
      return { token, user: { id: user.id, email: user.email, name: user.name } };
    },
  };
  return client;
}

/** The path with its parameters in place, for messages. */
function fillPath(path: string, params: Record<string, unknown> | undefined): string {
  return path.replace(/\{(\w+)\}/g, (whole, name: string) => (params?.[name] === undefined ? whole : encodeURIComponent(String(params[name]))));
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
