import type { App } from '../../../src/app';
import { routeKey } from './route';

/** A route of the app, as registered: method, `{param}` path template, and a pattern for concrete paths. */
export interface TableRoute {
  method: string;
  path: string;
  pattern: RegExp;
}

/** Hono's `/:o/:p/envs/:envName` (a `:name{regex}` too) → the OpenAPI-style `/{o}/{p}/envs/{envName}`. */
const toTemplate = (honoPath: string) => honoPath.replace(/:([A-Za-z0-9_]+)(\{[^}]*\})?\??/g, '{$1}');

/** `{param}` is one segment; a `*` (Hono's wildcard, `/api/auth/*`) is any rest of the path. */
const toPattern = (template: string) =>
  new RegExp(
    `^${template
      .split(/\{[^}]+\}/)
      .map((part) => part.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replaceAll('\\*', '.*'))
      .join('[^/]+')}$`,
  );

/**
 * Every route the app answers, in registration order (the order Hono tries
 * them in), read from Hono's own route table: OpenAPI routes and plain ones
 * alike. Middleware is registered as `ALL` entries; an `ALL` entry counts as a
 * route only on a path no method-specific route has and other than `/*`, so
 * `app.all('/x', handler)` needs a row too.
 */
export function routeTable(app: App): TableRoute[] {
  const specific = new Set(app.routes.filter((r) => r.method !== 'ALL').map((r) => r.path));
  const seen = new Set<string>();
  const table: TableRoute[] = [];
  for (const route of app.routes) {
    if (route.method === 'ALL' && (route.path === '/*' || specific.has(route.path))) continue;
    const path = toTemplate(route.path);
    const key = routeKey({ method: route.method, path });
    if (seen.has(key)) continue; // validators and middleware repeat a route's entry
    seen.add(key);
    table.push({ method: route.method, path, pattern: toPattern(path) });
  }
  return table;
}

/** The route a request lands on: the first registered one whose method and template match. */
export function resolveRoute(table: TableRoute[], method: string, url: string): TableRoute | undefined {
  const path = new URL(url, 'http://matrix.invalid').pathname;
  return table.find((route) => (route.method === method || route.method === 'ALL') && route.pattern.test(path));
}
