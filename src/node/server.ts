import { serve, type ServerType } from '@hono/node-server';
import { createApp } from '../app';
import { ConfigError, SECRET_VARIABLES } from '../config';
import { createLogger } from '../logger';
import { Secret } from '../secret';
import { createNodePlatform, type NodePlatform } from './platform';

/**
 * `npm start`: the whole API on Node. With no environment at all it serves
 * http://127.0.0.1:3000 from an embedded PGlite database in `.cellplane/`.
 */
export async function startServer(env: Record<string, string | undefined>): Promise<{
  node: NodePlatform;
  server: ServerType;
  url: string;
  stop(): Promise<void>;
}> {
  const node = await createNodePlatform(env);
  const { config, logger } = node.platform;
  const app = createApp(node.platform);
  const hostname = env.HOST || '127.0.0.1';
  const server = await new Promise<ServerType>((resolveServer, reject) => {
    const s = serve({ fetch: app.fetch, port: config.port, hostname }, () => resolveServer(s));
    s.once('error', reject);
  });
  node.jobs.start();
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  const url = `http://${hostname.includes(':') ? `[${hostname}]` : hostname}:${port}`;
  logger.info('cellplane listening', {
    url,
    database: node.dataDir ? `embedded PGlite in ${node.dataDir}` : 'postgres (DATABASE_URL)',
    deployment: config.deployment,
  });

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      logger.info('shutting down');
      // open streams would hold server.close() forever: end them first
      node.hub.close();
      await new Promise<void>((done) => server.close(() => done()));
      await node.close();
      logger.info('stopped');
    })());
  return { node, server, url, stop };
}

const isEntryPoint = process.argv[1] && import.meta.url.endsWith(process.argv[1].replace(/\\/g, '/'));

if (isEntryPoint) {
  startServer(process.env).then(
    ({ stop }) => {
      for (const signal of ['SIGINT', 'SIGTERM'] as const) {
        process.once(signal, () => {
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
