import { resolve } from 'node:path';
import { createApp } from '../app';
import { createNodePlatform } from '../node/platform';
import { CellplaneError, createClient, type CellplaneClient } from '../sdk';
import { CliError } from './errors';
/** What local mode tells the user (stderr). */
interface Notices {
  info(text: string): void;
}

/** The base URL of the embedded app: requests never leave the process, so it names no real host. */
export const LOCAL_BASE_URL = 'http://cellplane.local';

/**
 * Local-first mode (`cellplane --local`): the whole API inside the CLI's own
 * process, on the embedded database in `dataDir` — the folder `npm start`
 * serves with the same CELLPLANE_DATA_DIR — with no port opened and no
 * token: the process is the operator (src/auth/principal.ts,
 * LocalOperatorPrincipal). Deliveries run while the command runs.
 *
 * The organization and project in effect are created on first use.
 */
export async function openLocal(options: { dataDir: string; org: string; project: string; out: Notices }): Promise<{
  client: CellplaneClient;
  close(): Promise<void>;
}> {
  const dataDir = resolve(options.dataDir);
  const node = await openEmbedded(dataDir);
  const app = createApp({ ...node.platform, localOperator: true });
  node.jobs.start();
  const client = createClient({ baseUrl: LOCAL_BASE_URL, fetch: async (request) => app.fetch(request) });
  try {
    await ensureTenant(client, options);
  } catch (error) {
    await node.close();
    throw error;
  }
  return { client, close: () => node.close() };
}

async function openEmbedded(dataDir: string) {
  try {
    return await createNodePlatform(
      // the embedded database, never DATABASE_URL whatever the shell has set; OUTBOUND_ALLOWED_HOSTS lets
      // a local action's webhook reach a receiver on this machine, as it does for `npm start`
      { CELLPLANE_DATA_DIR: dataDir, LOG_LEVEL: 'warn', OUTBOUND_ALLOWED_HOSTS: process.env.OUTBOUND_ALLOWED_HOSTS },
      { logSink: (line) => process.stderr.write(`${line}\n`) },
    );
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new CliError(
      `could not open the local database in ${dataDir}: ${reason}`,
      'is `npm start` (or another cellplane --local) using it right now? The embedded database serves one process at a time: stop it, or point --data-dir elsewhere.',
    );
  }
}

async function ensureTenant(client: CellplaneClient, options: { org: string; project: string; out: Notices }): Promise<void> {
  const created: string[] = [];
  try {
    await client.GET('/orgs/{id}', { params: { path: { id: options.org } } });
  } catch (error) {
    if (!(error instanceof CellplaneError && error.status === 404)) throw error;
    await client.POST('/orgs', { body: { name: options.org, slug: options.org } });
    created.push(`organization "${options.org}"`);
  }
  const projects = await client.GET('/orgs/{o}/projects', { params: { path: { o: options.org } } });
  if (!projects.some((project) => project.slug === options.project)) {
    await client.POST('/orgs/{o}/projects', { params: { path: { o: options.org } }, body: { name: options.project, slug: options.project } });
    created.push(`project "${options.project}"`);
  }
  if (created.length > 0) options.out.info(`local: created ${created.join(' and ')}`);
}
