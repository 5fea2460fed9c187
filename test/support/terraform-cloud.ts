import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A local stand-in for the Terraform Cloud / Enterprise API, on 127.0.0.1:
 * the three endpoints the import uses — `GET /api/v2/organizations/{org}/workspaces/{name}`,
 * `GET /api/v2/workspaces/{id}/current-state-version` (JSON:API, with
 * `hosted-state-download-url`) and the download itself — answering 401 and
 * 404 as TFC does (JSON:API `errors`). The download is served by a second
 * server (another origin, as archivist.terraform.io is), or by the API's own
 * origin, or through a redirect from the API's origin to the other one.
 * Every request to either server is recorded with its Authorization header,
 * so a test can assert the token never left the API's origin.
 */

export interface RecordedRequest {
  origin: string;
  method: string;
  path: string;
  authorization: string | undefined;
}

export type DownloadMode = 'other-origin' | 'same-origin' | 'redirect-to-other-origin';

export interface TerraformCloudStub {
  /** `http://127.0.0.1:<port>` of the API. */
  origin: string;
  /** `127.0.0.1:<port>`: what --hostname takes. */
  host: string;
  /** The download server's origin. */
  downloadOrigin: string;
  requests: RecordedRequest[];
  /** Serves `state` (the file's text) as the current state of `org/name`. */
  addWorkspace(organization: string, name: string, state: string | undefined): void;
  close(): Promise<void>;
}

const JSON_API = 'application/vnd.api+json';

function send(response: ServerResponse, status: number, body: unknown, type = JSON_API): void {
  response.writeHead(status, { 'content-type': type });
  response.end(typeof body === 'string' ? body : JSON.stringify(body));
}

const errors = (status: number, title: string) => ({ errors: [{ status: String(status), title }] });

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

export async function startTerraformCloud(options: { token: string; download?: DownloadMode }): Promise<TerraformCloudStub> {
  const mode = options.download ?? 'other-origin';
  const requests: RecordedRequest[] = [];
  const workspaces = new Map<string, { id: string; state: string | undefined }>();
  const blobs = new Map<string, string>();
  let origin = '';
  let downloadOrigin = '';

  const record = (serverOrigin: string, request: IncomingMessage) =>
    requests.push({ origin: serverOrigin, method: request.method ?? 'GET', path: request.url ?? '/', authorization: request.headers.authorization });

  const archivist = createServer((request, response) => {
    record(downloadOrigin, request);
    const blob = blobs.get(new URL(request.url ?? '/', downloadOrigin).pathname);
    // a signed URL needs no token, as archivist's do
    if (blob === undefined) return send(response, 404, errors(404, 'not found'));
    send(response, 200, blob, 'application/json');
  });

  const api = createServer((request, response) => {
    record(origin, request);
    const url = new URL(request.url ?? '/', origin);
    const blob = blobs.get(url.pathname);
    if (url.pathname.startsWith('/_archivist/')) {
      if (mode === 'redirect-to-other-origin') {
        response.writeHead(307, { location: `${downloadOrigin}${url.pathname}` });
        return response.end();
      }
      if (blob === undefined) return send(response, 404, errors(404, 'not found'));
      return send(response, 200, blob, 'application/json');
    }
    if (request.headers.authorization !== `Bearer ${options.token}`) return send(response, 401, errors(401, 'unauthorized'));
    let match = /^\/api\/v2\/organizations\/([^/]+)\/workspaces\/([^/]+)$/.exec(url.pathname);
    if (match && request.method === 'GET') {
      const workspace = workspaces.get(`${decodeURIComponent(match[1]!)}/${decodeURIComponent(match[2]!)}`);
      if (!workspace) return send(response, 404, errors(404, 'not found'));
      return send(response, 200, {
        data: { id: workspace.id, type: 'workspaces', attributes: { name: decodeURIComponent(match[2]!), 'execution-mode': 'remote' } },
      });
    }
    match = /^\/api\/v2\/workspaces\/([^/]+)\/current-state-version$/.exec(url.pathname);
    if (match && request.method === 'GET') {
      const workspace = [...workspaces.values()].find((candidate) => candidate.id === match![1]);
      if (!workspace || workspace.state === undefined) return send(response, 404, errors(404, 'not found'));
      const path = `/_archivist/v1/object/${workspace.id}-${Math.random().toString(36).slice(2)}`;
      blobs.set(path, workspace.state);
      const download = mode === 'other-origin' ? `${downloadOrigin}${path}` : `${origin}${path}`;
      return send(response, 200, {
        data: {
          id: `sv-${workspace.id.slice(3)}`,
          type: 'state-versions',
          attributes: { serial: JSON.parse(workspace.state).serial, 'hosted-state-download-url': download },
        },
      });
    }
    send(response, 404, errors(404, 'not found'));
  });

  origin = await listen(api);
  downloadOrigin = await listen(archivist);
  let counter = 0;
  return {
    origin,
    host: new URL(origin).host,
    downloadOrigin,
    requests,
    addWorkspace(organization, name, state) {
      workspaces.set(`${organization}/${name}`, { id: `ws-${(++counter).toString().padStart(16, '0')}`, state });
    },
    async close() {
      await Promise.all([api, archivist].map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
    },
  };
}
