import { OpenAPIHono } from '@hono/zod-openapi';
import type { Hook } from '@hono/zod-openapi';
import type { Context, Env, MiddlewareHandler, Next } from 'hono';
import type { ZodError, ZodType } from 'zod';
import type { AppEnv } from '../context';
import { ApiError } from './errors';

type Target = 'json' | 'form' | 'query' | 'param' | 'header' | 'cookie';

/** A schema violation as the API answers it: 400 validation_failed, with one detail per issue. */
function validationFailed(target: Target, error: ZodError): ApiError {
  const details = error.issues.map((issue) => ({
    path: issue.path.map(String).join('.') || '(root)',
    message: issue.message,
  }));
  return new ApiError(
    'validation_failed',
    `invalid ${target === 'json' ? 'request body' : target}: ${details.map((d) => `${d.path} ${d.message}`).join('; ')}`,
    details,
  );
}

/** The routes' validation hook (@hono/zod-openapi's `defaultHook`): a failed check throws validationFailed. */
export const validationHook: Hook<unknown, AppEnv, string, unknown> = (result) => {
  if (!result.success) throw validationFailed(result.target as Target, result.error);
};

type OpenApi<E extends Env> = OpenAPIHono<E>['openapi'];
type RouteConfig = Parameters<OpenApi<Env>>[0];

/**
 * The API's route groups: an OpenAPIHono whose routes check their path and
 * query parameters in one synchronous step.
 *
 * @hono/zod-openapi checks each part of a request through
 * @hono/zod-validator: an async middleware per part, each reading the
 * Content-Type header, parsing with `safeParseAsync` and awaiting the hook,
 * four promises for a path's few strings. A GET spent 7 µs of CPU there
 * (bench/http-results.md, "2026-11-28, third"). Here the path and query are parsed
 * with `safeParse` and handed to the route as validated data, so
 * `c.req.valid('param')` and `c.req.valid('query')` read them as before, at
 * the same point of the route: after its own middleware. Their schemas must be
 * synchronous: an async refinement would throw, and test/node/fuzz.test.ts,
 * which calls every route, would find the 500. What the document says of a
 * route is unchanged: the route is registered whole, then added without the
 * two parts for the library to check.
 *
 * A route with a hook of its own, or a body only, is left to the library.
 */
export class ApiRoutes<E extends Env = AppEnv> extends OpenAPIHono<E> {
  constructor(init?: ConstructorParameters<typeof OpenAPIHono<E>>[0]) {
    super(init);
    // the library's own method, called untyped: the route's types are the caller's, unchanged
    const add = this.openapi as unknown as (config: RouteConfig, handler: unknown, hook?: unknown) => unknown;
    this.openapi = ((config: RouteConfig, handler: unknown, hook: unknown) => {
      const { middleware, hide, ...route } = config;
      const { params, query } = route.request ?? {};
      if ((!params && !query) || hook !== undefined) return add(config, handler, hook);
      if (!hide) this.openAPIRegistry.registerPath(route);
      const checked = {
        ...route,
        hide: true,
        request: { ...route.request, params: undefined, query: undefined },
        // after the route's own middleware (a caller's check that must answer first), before the library's body check: its order
        middleware: [...(middleware === undefined ? [] : [middleware].flat()), checkParameters(query as ZodType | undefined, params as ZodType | undefined)],
      };
      return add(checked, handler);
    }) as OpenApi<E>;
  }
}

/**
 * Parses the query, then the path, and hands each on as the route's
 * validated data: where the library checked them, after the route's own
 * middleware and before its body.
 */
const checkParameters =
  (query: ZodType | undefined, params: ZodType | undefined): MiddlewareHandler =>
  (c: Context, next: Next) => {
    if (query) c.req.addValidatedData('query', parsed(query, 'query', queryValues(c)));
    if (params) c.req.addValidatedData('param', parsed(params, 'param', c.req.param()));
    return next();
  };

function parsed(schema: ZodType, target: Target, value: unknown): object {
  const result = schema.safeParse(value);
  if (!result.success) throw validationFailed(target, result.error);
  return result.data as object;
}

/** The query as @hono/zod-validator reads it: a name given once maps to its value, one given more often to all of them. */
function queryValues(c: Context): Record<string, string | string[]> {
  const values: Record<string, string | string[]> = {};
  for (const [name, all] of Object.entries(c.req.queries())) values[name] = all.length === 1 ? all[0]! : all;
  return values;
}
