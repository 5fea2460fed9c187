import type { Server } from 'node:http';
import { serve, type ServerType } from '@hono/node-server';
import { createApp } from '../app';
import { ConfigError, SECRET_VARIABLES } from '../config';
import { createLogger } from '../logger';
import { Secret } from '../secret';
import { answerClientErrors } from './client-errors';
import { createStdoutSink } from './log-sink';
import { createNodePlatform, listeningUrl, logListening, RELAYED_SIGNAL_MS, type NodePlatform } from './platform';

/**
 * `npm start`: the whole API on Node. With no environment at all it serves
 * http://127.0.0.1:3000 from an embedded PGlite database in `.cellplane/`.
 *
 * `stop` (SIGTERM, SIGINT) ends within the grace period (docs/decisions.md,
 * "Node host lifecycle"): no new connection or job is taken, change streams
 * end at once, requests and delivery attempts in flight get the grace period
 * to finish; then the attempts still waiting on a receiver are aborted
 * (unrecorded, made again after a restart) and every connection still open,
 * a half-sent upload included, is closed.
 */
export async function startServer(env: Record<string, string | undefined>): Promise<{
  node: NodePlatform;
  server: ServerType;
  url: string;
  /** SHUTDOWN_GRACE_SECONDS, in milliseconds. */
  graceMs: number;
  stop(): Promise<void>;
}> {
  const node = await createNodePlatform(env, { logSink: createStdoutSink() });
  const { config, logger } = node.platform;
  const graceMs = config.shutdownGraceMs;
  const app = createApp(node.platform);
  const hostname = env.HOST || '127.0.0.1';
  const server = await new Promise<ServerType>((resolveServer, reject) => {
    const s = serve({ fetch: app.fetch, port: config.port, hostname }, () => resolveServer(s));
    s.once('error', reject);
  });
  answerClientErrors(server as Server);
  node.jobs.start();
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  // without DATABASE_URL this is also API_BASE_URL's default (src/node/platform.ts)
  const url = listeningUrl(hostname, port);
  logListening(node, url);

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      logger.info('shutting down', { graceSeconds: graceMs / 1000 });
      // open streams would hold server.close() forever: end them first
      node.hub.close();
      const http = server as Server;
      // no new connections; the idle keep-alive ones are closed now (Node ≥ 19), and those going idle below
      const closed = new Promise<void>((done) => http.close(() => done()));
      const closeIdle = setInterval(() => http.closeIdleConnections(), 100);
      let graceTimer: ReturnType<typeof setTimeout> | undefined;
      const graceOver = new Promise<void>((done) => (graceTimer = setTimeout(done, graceMs)));
      // the job runner keeps its own count of the same grace period, then aborts its attempts
      const [abortedAttempts] = await Promise.all([node.jobs.stop(graceMs), Promise.race([closed, graceOver])]);
      clearTimeout(graceTimer);
      clearInterval(closeIdle);
      const open = await new Promise<number>((done) => http.getConnections((error, count) => done(error ? 0 : count)));
      // a slow or stalled upload, a request still being answered: cut off
      http.closeAllConnections();
      await closed;
      await node.close();
      logger.info('stopped', { abortedAttempts, closedConnections: open });
    })());
  return { node, server, url, graceMs, stop };
}

const isEntryPoint = process.argv[1] && import.meta.url.endsWith(process.argv[1].replace(/\\/g, '/'));

if (isEntryPoint) {
  startServer(process.env).then(
    ({ stop, graceMs }) => {
      let stoppingSince: number | undefined;
      for (const signal of ['SIGINT', 'SIGTERM'] as const) {
        process.on(signal, () => {
          if (stoppingSince !== undefined) {
            if (Date.now() - stoppingSince < RELAYED_SIGNAL_MS) return;
            // asked again: Node's default, at once
            process.removeAllListeners(signal);
            process.kill(process.pid, signal);
            return;
          }
          stoppingSince = Date.now();
          // a stop stuck past its grace period (a database that does not answer) must not hold the process
          setTimeout(() => {
            console.error('cellplane: shutdown did not finish in time; exiting');
            process.exit(1);
          }, graceMs + 10_000).unref();
          stop().then(
            () => process.exit(0),
            (error) => {
              console.error(`cellplane: shutdown failed: ${error instanceof Error ? error.message : String(error)}`);
              process.exit(1);
            },
          );
        });
      }
    },
    (error) => {
      if (error instanceof ConfigError) {
        // names the variable and what it expects, never the value
        console.error(error.message);
      } else {
        const secrets = SECRET_VARIABLES.map((name) => process.env[name]).filter(Boolean).map((v) => new Secret(v!));
        createLogger({ secrets }).error('cellplane failed to start', { error });
      }
      process.exit(1);
    },
  );
}
