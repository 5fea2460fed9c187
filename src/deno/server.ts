import { createApp } from '../app';
import { ConfigError, SECRET_VARIABLES } from '../config';
import { createLogger, type LogSink } from '../logger';
import type { RateLimits } from '../platform';
import { Secret } from '../secret';
import { createStdoutSink } from '../node/log-sink';
import { createNodePlatform, listeningUrl, logListening, RELAYED_SIGNAL_MS, type NodePlatform } from '../node/platform';

/**
 * `npm run deno`: the whole API on Deno, with the variables and behaviour of
 * `npm start` (docs/deno.md). The platform is the Node host's
 * (src/node/platform.ts) under Deno's Node compatibility: PGlite in
 * CELLPLANE_DATA_DIR or `pg` on DATABASE_URL, the job runner and reaper, the
 * change hub, the rate limiter, the mailer. Only what Deno does differently
 * is here: Deno.serve, where the client's address comes from, signals.
 *
 * `stop` (SIGTERM, SIGINT) follows the Node host's lifecycle (src/node/server.ts):
 * change streams end at once, no new job is taken, requests and delivery
 * attempts in flight get SHUTDOWN_GRACE_SECONDS; then the attempts still
 * waiting are aborted and the process ends, cutting what is left. One
 * difference: Deno.serve cannot stop listening without failing the request
 * bodies still being read, so it listens until the requests in flight are
 * answered (docs/deno.md).
 */
export async function startDenoServer(
  env: Record<string, string | undefined>,
  logSink: LogSink = createStdoutSink(),
): Promise<{
  node: NodePlatform;
  server: Deno.HttpServer;
  url: string;
  /** SHUTDOWN_GRACE_SECONDS, in milliseconds. */
  graceMs: number;
  stop(): Promise<void>;
}> {
  const node = await createNodePlatform(env, { logSink });
  const { config, logger } = node.platform;
  const graceMs = config.shutdownGraceMs;
  const app = createApp({ ...node.platform, rateLimits: withDenoClientAddress(node.platform.rateLimits!) });
  const hostname = env.HOST || '127.0.0.1';
  /** Requests the app has not answered yet (a stream counts until its Response is returned, not until it ends). */
  const inFlight = new Set<Promise<Response>>();
  // binds at once, throwing here if it cannot; onListen replaced: Deno's own "Listening on" line is not ours
  const server = Deno.serve({ port: config.port, hostname, onListen: () => {} }, (request, info) => {
    const refused = refuseLargeHead(request);
    if (refused) return refused;
    // Deno's connection info is the env Hono hands the app (c.env), as @hono/node-server's is on Node
    const answer = Promise.resolve(app.fetch(request, info));
    inFlight.add(answer);
    const settled = () => inFlight.delete(answer);
    answer.then(settled, settled);
    return answer;
  });
  node.jobs.start();
  // without DATABASE_URL this is also API_BASE_URL's default (src/node/platform.ts)
  const url = listeningUrl(hostname, server.addr.transport === 'tcp' ? server.addr.port : config.port);
  logListening(node, url);

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      logger.info('shutting down', { graceSeconds: graceMs / 1000 });
      // open streams would hold the shutdown for ever: end them first
      node.hub.close();
      let graceTimer: ReturnType<typeof setTimeout> | undefined;
      const graceOver = new Promise<void>((done) => (graceTimer = setTimeout(done, graceMs)));
      const drain = async () => {
        // shutdown() fails the request bodies still being read (a 500 for an upload under way): the requests in flight finish first
        await Promise.race([Promise.allSettled([...inFlight]), graceOver]);
        // streams opened meanwhile end too; then no new connections, and the idle ones are closed
        node.hub.close();
        await Promise.race([server.shutdown(), graceOver]);
      };
      // the job runner keeps its own count of the same grace period, then aborts its attempts
      const [abortedAttempts] = await Promise.all([node.jobs.stop(graceMs), drain()]);
      clearTimeout(graceTimer);
      // a request still being answered (a stalled upload) is cut off when the process ends
      const unfinishedRequests = inFlight.size;
      await node.close();
      logger.info('stopped', { abortedAttempts, unfinishedRequests });
    })());
  return { node, server, url, graceMs, stop };
}

/** Node's default bound on a request head (its HTTP parser's max header size). */
const MAX_HEAD_BYTES = 16 * 1024;

/**
 * Node's parser refuses a request head over 16 KiB, and the Node host answers
 * `431 headers_too_large` (src/node/client-errors.ts); Deno's server takes
 * heads up to its own, larger bound. The same refusal here, the head's size
 * counted from the parsed request line and headers, so within a few bytes
 * of Node's count.
 */
function refuseLargeHead(request: Request): Response | undefined {
  const url = new URL(request.url);
  let bytes = `${request.method} ${url.pathname}${url.search} HTTP/1.1\r\n`.length;
  for (const [name, value] of request.headers) bytes += name.length + value.length + 4;
  if (bytes <= MAX_HEAD_BYTES) return undefined;
  const body = { error: 'request head exceeds 16 KiB (request line and headers)', code: 'headers_too_large' };
  return new Response(JSON.stringify(body), { status: 431, headers: { 'content-type': 'application/json', connection: 'close' } });
}

/**
 * The Node limiter (NodeRateLimits) reads the peer from @hono/node-server's
 * request objects; under Deno.serve the app's env is the handler's
 * ServeHandlerInfo, whose remoteAddr is the peer. In-process requests
 * (`app.request`) carry none: undefined, as on Node.
 */
function withDenoClientAddress(rateLimits: RateLimits): RateLimits {
  return {
    clientAddress: (c) => {
      const remote = (c.env as Partial<Deno.ServeHandlerInfo> | undefined)?.remoteAddr;
      return remote?.transport === 'tcp' ? remote.hostname : undefined;
    },
    hit: (key, limit) => rateLimits.hit(key, limit),
    peek: (key, limit) => rateLimits.peek(key, limit),
  };
}

/**
 * Ends the process. Deno.exit does not emit Node's 'exit' event, on which the
 * stdout sink (src/node/log-sink.ts) would write the lines it holds: they go first.
 */
const exitAfter =
  (sink: { flush(): void }) =>
  (code: number): never => {
    sink.flush();
    return Deno.exit(code);
  };

/** Ends the process once the stop is done. */
function stopOnSignals(stop: () => Promise<void>, graceMs: number, exit: (code: number) => never): void {
  let signalledAt: number | undefined;
  const onSignal = (signal: 'SIGINT' | 'SIGTERM') => {
    if (signalledAt !== undefined) {
      // the same stop relayed (npm, a signal to the process group): ignored
      if (Date.now() - signalledAt < RELAYED_SIGNAL_MS) return;
      // asked again: the process ends at once, as Node's default does for the Node host (128 + the signal's number)
      exit(signal === 'SIGINT' ? 130 : 143);
    }
    signalledAt = Date.now();
    // a stop stuck past its grace period (a database that does not answer) must not hold the process
    Deno.unrefTimer(
      setTimeout(() => {
        console.error('cellplane: shutdown did not finish in time; exiting');
        exit(1);
      }, graceMs + 10_000),
    );
    stop().then(
      () => exit(0),
      (error) => {
        console.error(`cellplane: shutdown failed: ${error instanceof Error ? error.message : String(error)}`);
        exit(1);
      },
    );
  };
  for (const signal of ['SIGINT', 'SIGTERM'] as const) Deno.addSignalListener(signal, () => onSignal(signal));
}

if (import.meta.main) {
  const env = Deno.env.toObject();
  const sink = createStdoutSink();
  const exit = exitAfter(sink);
  startDenoServer(env, sink).then(
    ({ stop, graceMs }) => stopOnSignals(stop, graceMs, exit),
    (error) => {
      if (error instanceof ConfigError) {
        // names the variable and what it expects, never the value
        console.error(error.message);
      } else {
        const secrets = SECRET_VARIABLES.map((name) => env[name]).filter(Boolean).map((v) => new Secret(v!));
        createLogger({ secrets }).error('cellplane failed to start', { error });
      }
      exit(1);
    },
  );
}
