import { DurableObject } from 'cloudflare:workers';

/**
 * One instance per environment: the entity change stream's fan-out (SSE)
 * on the Worker host. The binding and its migration exist so the class name
 * is fixed in wrangler.toml from the first deploy; the stream itself comes
 * with a later issue, and until then every request is told so plainly.
 */
export class EnvironmentStream extends DurableObject {
  override async fetch(_request: Request): Promise<Response> {
    return Response.json(
      { error: 'the entity change stream is not implemented yet', code: 'not_implemented' },
      { status: 501 },
    );
  }
}
