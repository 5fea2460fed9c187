import { DurableObject } from 'cloudflare:workers';
import { ApiError } from '../src/http/errors';
import type { Platform } from '../src/platform';
import { ChangeHub } from '../src/stream/hub';
import { decodeSubscription, SUBSCRIPTION_HEADER } from '../src/stream/subscription';
import { openSseResponse } from '../src/stream/sse-response';
import { createWorkerPlatform, type WorkerEnv } from '../src/worker-platform';

/**
 * One instance per environment (named by its id): the entity change
 * stream's fan-out on the Worker host. It holds the environment's SSE
 * connections in a ChangeHub (src/stream/hub.ts), the same fan-out the Node
 * host runs in-process. The Worker has already authorized each subscriber;
 * requests reach this object only through its binding, never from outside.
 *
 * - `GET /subscribe` (header `x-cellplane-subscription`): an SSE response.
 * - `POST /publish`: the log grew; read it and fan out. A publish that never
 *   arrives (the writing request lost this call) is made up for by the
 *   heartbeat, which reads the log every 15 s.
 */

/** Connections one environment may hold; beyond it the stream answers 503 stream_limit_reached. */
export const MAX_STREAMS_PER_ENVIRONMENT = 2000;

export class EnvironmentStream extends DurableObject<WorkerEnv> {
  #platform: Platform | undefined;
  #hub: ChangeHub | undefined;

  #hubFor(): ChangeHub {
    if (!this.#hub) {
      const platform = (this.#platform ??= createWorkerPlatform(this.env));
      this.#hub = new ChangeHub(
        {
          // a connection per read: I/O opened in one request may not serve another's
          withDb: async (work) => {
            const lease = platform.openDatabase();
            try {
              return await work(lease.db);
            } finally {
              await lease.release();
            }
          },
          clock: platform.clock,
          logger: platform.logger,
        },
        { maxSubscribersPerEnvironment: MAX_STREAMS_PER_ENVIRONMENT },
      );
    }
    return this.#hub;
  }

  override async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    try {
      if (request.method === 'POST' && url.pathname === '/publish') {
        const { envId } = (await request.json()) as { envId: string };
        await this.#hubFor().publish(envId);
        return new Response(null, { status: 204 });
      }
      if (request.method === 'GET' && url.pathname === '/subscribe') {
        const header = request.headers.get(SUBSCRIPTION_HEADER);
        if (!header) return Response.json({ error: 'missing subscription', code: 'validation_failed' }, { status: 400 });
        return openSseResponse(this.#hubFor(), decodeSubscription(header));
      }
      return Response.json({ error: `no route for ${request.method} ${url.pathname}`, code: 'not_found' }, { status: 404 });
    } catch (error) {
      if (error instanceof ApiError) return Response.json(error.toBody(), { status: error.status });
      throw error;
    }
  }
}
