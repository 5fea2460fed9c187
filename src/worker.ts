import { createApp, type App } from './app';
import { ConfigError } from './config';
import type { Platform } from './platform';
import { runPorts } from './modules/action-runs/run-ports';
import { createRunEngine, type RunEngine } from './runs/engine';
import { consumeDeadLetters, consumeDeliveries, scheduledTick } from './runs/queue';
import { createWorkerPlatform, deliveryQueue, type WorkerEnv } from './worker-platform';

export { EnvironmentStream } from '../durable-objects/environment-stream';
export { RateLimiter } from '../durable-objects/rate-limiter';
export type { WorkerEnv } from './worker-platform';

/**
 * Cloudflare Worker host. The platform and the app are built once per
 * isolate, on the first invocation (a Worker's `env` arrives with it), and
 * reused after it.
 *
 * - `fetch`: the API.
 * - `queue`: the deliveries queue (one attempt per message, each acked or
 *   retried on its own) and its dead-letter queue (the run fails).
 * - `scheduled`: the cron tick, reaping timed-out runs and re-sending
 *   deliveries whose message was lost.
 */
let platform: Platform | undefined;
let app: App | undefined;

function platformFor(env: WorkerEnv): Platform {
  return (platform ??= createWorkerPlatform(env));
}

/** The run engine on a database handle of this invocation, released when `work` is done. */
async function withEngine<T>(env: WorkerEnv, work: (engine: RunEngine) => Promise<T>): Promise<T> {
  const { config, logger, clock } = platformFor(env);
  const lease = platformFor(env).openDatabase();
  try {
    return await work(createRunEngine({ db: lease.db, config, logger, clock, ports: runPorts }));
  } finally {
    await lease.release();
  }
}

/** Its dead-letter queue is named after the deliveries queue (wrangler.toml). */
const isDeadLetterQueue = (queue: string) => queue.endsWith('-dlq');

export default {
  fetch(request, env, ctx) {
    if (!app) {
      try {
        app = createApp(platformFor(env));
      } catch (error) {
        return misconfigured(error);
      }
    }
    return app.fetch(request, env, ctx);
  },

  async queue(batch, env) {
    await withEngine(env, (engine) =>
      isDeadLetterQueue(batch.queue)
        ? consumeDeadLetters(engine, batch.messages)
        : consumeDeliveries(engine, deliveryQueue(env), batch.messages),
    );
  },

  async scheduled(_controller, env) {
    await withEngine(env, (engine) => scheduledTick(engine, deliveryQueue(env)));
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
