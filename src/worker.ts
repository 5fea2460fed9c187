import { createApp, type App } from './app';
import { ConfigError } from './config';
import { createWorkerPlatform, type WorkerEnv } from './worker-platform';

export { EnvironmentStream } from '../durable-objects/environment-stream';
export type { WorkerEnv } from './worker-platform';

/**
 * Cloudflare Worker host. The config and the app are built once per isolate,
 * on the first request (a Worker's `env` arrives with the request), and
 * reused by every request after it.
 *
 * Only `fetch` for now: the `queue` consumer (deliveries) and the
 * `scheduled` reaper come with the execution engine, and no stub stands in
 * for them meanwhile.
 */
let app: App | undefined;

export default {
  fetch(request, env, ctx) {
    if (!app) {
      try {
        app = createApp(createWorkerPlatform(env));
      } catch (error) {
        return misconfigured(error);
      }
    }
    return app.fetch(request, env, ctx);
  },
} satisfies ExportedHandler<WorkerEnv>;

/**
 * A Worker that cannot start still answers in the API's error shape. The
 * details (which variables, what they expect; never their values) go to the
 * Worker's logs, not to the client. Nothing is cached, so a fixed
 * configuration is picked up by the next isolate.
 */
function misconfigured(error: unknown): Response {
  if (!(error instanceof ConfigError)) throw error;
  console.error(error.message);
  return Response.json(
    { error: 'the server is misconfigured; the operator can find the details in its logs', code: 'internal' },
    { status: 500 },
  );
}
