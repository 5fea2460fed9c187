/**
 * Load over real HTTP for `npm run bench -- http`: autocannon's clients in
 * this process against a child server, every response's latency kept at
 * full resolution (autocannon's own histogram counts whole milliseconds,
 * too coarse for a 1 ms read), and the child's RSS read from /proc.
 */
import { readFile } from 'node:fs/promises';
import autocannon from 'autocannon';

/** What one request sends: autocannon builds it, Content-Length included. */
export interface Send {
  method: 'GET' | 'POST';
  path: string;
  /** JSON text; sent with content-type: application/json. */
  body?: string;
}

/** One run of load, or several of the same case merged. */
export interface Trial {
  /** Milliseconds per 2xx response, in arrival order. */
  latencies: number[];
  ok: number;
  non2xx: number;
  /** Connection errors and timeouts. */
  errors: number;
  /** Responses by status code. */
  statuses: Map<number, number>;
  /** Wall time the load ran. */
  ms: number;
}

export const perSecond = (trial: Trial) => trial.ok / (trial.ms / 1000);

export function quantile(values: number[], q: number): number {
  if (!values.length) return Number.NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

export const p50 = (trial: Trial) => quantile(trial.latencies, 0.5);

export function merge(trials: Trial[]): Trial {
  const statuses = new Map<number, number>();
  for (const trial of trials) for (const [status, count] of trial.statuses) statuses.set(status, (statuses.get(status) ?? 0) + count);
  return {
    latencies: trials.flatMap((trial) => trial.latencies),
    ok: trials.reduce((sum, trial) => sum + trial.ok, 0),
    non2xx: trials.reduce((sum, trial) => sum + trial.non2xx, 0),
    errors: trials.reduce((sum, trial) => sum + trial.errors, 0),
    statuses,
    ms: trials.reduce((sum, trial) => sum + trial.ms, 0),
  };
}

/** "201 ×812, 409 ×3, 2 errors": what a trial got back. */
export function describeOutcome(trial: Trial): string {
  const parts = [...trial.statuses].sort(([a], [b]) => a - b).map(([status, count]) => `${status} ×${count}`);
  if (trial.errors) parts.push(`${trial.errors} connection errors or timeouts`);
  return parts.join(', ') || 'no responses';
}

/**
 * `connections` keep-alive clients sending `next()`'s requests back to back
 * for `seconds`, each with the bearer `token`.
 */
export function fire(options: { url: string; token?: string; connections: number; seconds: number; next: () => Send }): Promise<Trial> {
  const latencies: number[] = [];
  const statuses = new Map<number, number>();
  let errors = 0;
  const headers: Record<string, string> = options.token ? { authorization: `Bearer ${options.token}` } : {};
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: options.url,
        connections: options.connections,
        duration: options.seconds,
        headers,
        requests: [
          {
            setupRequest: (request) => {
              const send = options.next();
              return {
                ...request,
                method: send.method,
                path: send.path,
                body: send.body,
                headers: send.body === undefined ? request.headers : { ...request.headers, 'content-type': 'application/json' },
              };
            },
          },
        ],
      },
      (error, result) => {
        if (error) return reject(error instanceof Error ? error : new Error(String(error)));
        const ok = [...statuses].reduce((sum, [status, count]) => sum + (status >= 200 && status < 300 ? count : 0), 0);
        const answered = [...statuses.values()].reduce((sum, count) => sum + count, 0);
        resolve({
          latencies,
          ok,
          non2xx: answered - ok,
          errors: Math.max(errors, result.errors),
          statuses,
          ms: result.finish.getTime() - result.start.getTime(),
        });
      },
    );
    instance.on('response', (_client, status, _bytes, ms) => {
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
      if (status >= 200 && status < 300) latencies.push(ms);
    });
    instance.on('reqError', () => errors++);
  });
}

/** A case of a comparison: `seconds` of load, returning what it measured. */
export type Case = (seconds: number) => Promise<Trial>;

/** Warm-up of a case before it is timed: a quarter of its time, 2 to 5 s. */
export const warmupSeconds = (seconds: number) => Math.min(5, Math.max(2, seconds / 4));

/**
 * Two cases compared over `seconds` each: both warmed up, then timed in
 * halves in the order a, b, b, a, so that load from elsewhere on the machine
 * (and any drift as the run goes on) lands on both alike.
 */
export async function interleaved(a: Case, b: Case, seconds: number): Promise<[Trial, Trial]> {
  await a(warmupSeconds(seconds));
  await b(warmupSeconds(seconds));
  const half = seconds / 2;
  const a1 = await a(half);
  const b1 = await b(half);
  const b2 = await b(half);
  const a2 = await a(half);
  return [merge([a1, a2]), merge([b1, b2])];
}

/** A process's resident set in MiB, from /proc/<pid>/status (VmRSS). */
export async function rssMiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kib = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
  if (!kib) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(kib[1]) / 1024;
}

/** Samples rssMiB(pid) every second until stopped; the samples are in order, one a second. */
export function sampleRss(pid: number): { stop(): Promise<number[]> } {
  const samples: number[] = [];
  let pending: Promise<unknown> = Promise.resolve();
  const timer = setInterval(() => {
    pending = rssMiB(pid).then((mib) => samples.push(mib));
  }, 1000);
  return {
    stop: async () => {
      clearInterval(timer);
      await pending;
      return samples;
    },
  };
}

/** The child's RSS over a long run: at the end of the warm-up, the most it reached after, and at the end. */
export interface Footprint {
  start: number;
  max: number;
  end: number;
  samples: number;
}

/**
 * One uninterrupted run of `warmupSeconds + seconds` at `connections`
 * clients, the child's RSS read each second; the footprint counts from the
 * end of the warm-up.
 */
export async function sustained(options: {
  url: string;
  token: string;
  pid: number;
  connections: number;
  warmupSeconds: number;
  seconds: number;
  next: () => Send;
}): Promise<{ trial: Trial; footprint: Footprint }> {
  const rss = sampleRss(options.pid);
  let all: number[] = [];
  let trial: Trial;
  try {
    trial = await fire({ ...options, seconds: options.warmupSeconds + options.seconds });
  } finally {
    all = await rss.stop();
  }
  // the sample taken at the end of the warm-up second is the first one counted
  const samples = all.slice(options.warmupSeconds - 1);
  if (!samples.length) throw new Error('no RSS sample was taken after the warm-up');
  return { trial, footprint: { start: samples[0]!, max: Math.max(...samples), end: samples.at(-1)!, samples: samples.length } };
}
