/**
 * Servers compared in the same slices of time, with what each request costs
 * every part of the machine: the GET rows' companion (bench/http.ts, reads).
 *
 * A pairing (load.ts, interleaved) times one server against the bare one
 * in four quarters of 2.5 s; each pairing of a run sees other minutes of
 * the machine, and this machine's rates move by up to a fifth between them
 * (bench/http-results.md, "2026-11-28, sixth"). Here every server takes a
 * short slice in turn, the order reversed each round, so all of them share
 * the same minutes. Beside each one's requests a second, the CPU time a
 * request took:
 *
 * - of the server (its process, every thread);
 * - of the Postgres backends serving the bench's database, when Postgres
 *   runs on this machine (a backend that starts within a slice is missed;
 *   the pools keep theirs, since no server idles for 10 s);
 * - of this process, which is the load (autocannon's clients).
 *
 * The server, Postgres and the clients share this machine's cores. When
 * those are the limit, requests a second follow the CPU a request costs in
 * all: a server whose request costs the machine 1.4 times the bare one's
 * serves about 0.7 times its rate, however that cost is split.
 */
import { cpuMs, cpuMsOf, postgresBackends } from './cpu';
import { describeOutcome, type Case } from './load';
import { printColumns } from './target';

export interface SliceServer {
  name: string;
  pid: number;
  /** Its load, as the rows time it. */
  load: Case;
}

export interface SliceCost {
  name: string;
  perSecond: number;
  /** µs of CPU a request: the server's, Postgres's (undefined when it runs elsewhere), the load's. */
  server: number;
  postgres: number | undefined;
  client: number;
}

/** `rounds` rounds of a `seconds` slice of each server, after one untimed slice each. */
export async function inSameSlices(servers: SliceServer[], options: { rounds: number; seconds: number; database: string }): Promise<SliceCost[]> {
  for (const server of servers) await server.load(options.seconds);
  const totals = servers.map(() => ({ ok: 0, ms: 0, server: 0, postgres: 0, client: 0 }));
  let postgresSeen = false;
  for (let round = 0; round < options.rounds; round++) {
    const order = servers.map((_, i) => i);
    if (round % 2 === 1) order.reverse();
    for (const i of order) {
      const server = servers[i]!;
      const backends = postgresBackends(options.database);
      postgresSeen ||= backends.length > 0;
      const postgresBefore = cpuMsOf(backends);
      const serverBefore = cpuMs(server.pid);
      const clientBefore = process.cpuUsage();
      const trial = await server.load(options.seconds);
      const client = process.cpuUsage(clientBefore);
      const serverMs = cpuMs(server.pid) - serverBefore;
      let postgresMs = 0;
      for (const [pid, after] of cpuMsOf(backends)) postgresMs += after - (postgresBefore.get(pid) ?? after);
      if (trial.non2xx || trial.errors) throw new Error(`${server.name} in the same slices: ${describeOutcome(trial)}`);
      const total = totals[i]!;
      total.ok += trial.ok;
      total.ms += trial.ms;
      total.server += serverMs;
      total.postgres += postgresMs;
      total.client += (client.user + client.system) / 1000;
    }
  }
  return servers.map((server, i) => {
    const total = totals[i]!;
    const perRequest = (ms: number) => (ms * 1000) / total.ok;
    return {
      name: server.name,
      perSecond: total.ok / (total.ms / 1000),
      server: perRequest(total.server),
      postgres: postgresSeen ? perRequest(total.postgres) : undefined,
      client: perRequest(total.client),
    };
  });
}

/** The costs as a table, each server's rate and CPU beside the last server's (the floor). */
export function printSlices(title: string, costs: SliceCost[]): void {
  const floor = costs[costs.length - 1]!;
  const inAll = (cost: SliceCost) => cost.server + (cost.postgres ?? 0) + cost.client;
  const micros = (value: number | undefined) => (value === undefined ? 'n/a' : value.toFixed(1));
  const titles = ['server', 'req/s', '÷ floor', 'server µs', 'Postgres µs', 'client µs', 'in all µs', 'floor ÷ in all'];
  const cells = costs.map((cost) => [
    cost.name,
    cost.perSecond.toFixed(0),
    `${(cost.perSecond / floor.perSecond).toFixed(2)}×`,
    micros(cost.server),
    micros(cost.postgres),
    micros(cost.client),
    micros(inAll(cost)),
    `${(inAll(floor) / inAll(cost)).toFixed(2)}×`,
  ]);
  printColumns(title, titles, cells);
}
