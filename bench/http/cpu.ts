/**
 * CPU time of the processes a `npm run bench -- http` measure involves, read
 * from /proc: its children (the app, the floors) and the Postgres backends
 * serving its database.
 *
 * CPU time is each thread's time on a CPU as the scheduler counts it, in
 * nanoseconds (the first field of /proc/<pid>/task/<tid>/schedstat), summed
 * over the process's threads and its descendants', so a pid of `npm` reads
 * the node process it started. utime + stime of /proc/<pid>/stat come in
 * clock ticks (10 ms): measures of a few tens of ticks, read ten times over,
 * moved a ratio by 8–27 % from that rounding alone (stream-cost.ts). Where
 * the kernel has no schedstat, ticks are read instead. A thread that exits
 * takes its time with it; node's threads (V8's, libuv's) live as long as the
 * process.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';

/** CPU time of `pid` and of every process under it, in ms. */
export const cpuMs: (pid: number) => number = existsSync('/proc/self/schedstat') ? (pid) => onCpuNs(pid) / 1e6 : (pid) => cpuTicks(pid) * (1000 / ticksPerSecond());

/** Time on a CPU of every thread of `pid` and of every process under it, in ns. */
function onCpuNs(pid: number): number {
  let ns = 0;
  for (const thread of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${thread}/schedstat`, 'utf8').split(' ')[0]);
      const children = readFileSync(`/proc/${pid}/task/${thread}/children`, 'utf8').trim();
      for (const child of children ? children.split(' ') : []) ns += onCpuNs(Number(child));
    } catch {
      // the thread ended between the listing and the read
    }
  }
  return ns;
}

/** utime + stime of `pid` and of every process under it, in clock ticks. */
function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // fields after the command name, which may hold spaces and parentheses
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  let ticks = Number(fields[11]) + Number(fields[12]);
  for (const thread of readdirSync(`/proc/${pid}/task`)) {
    const children = readFileSync(`/proc/${pid}/task/${thread}/children`, 'utf8').trim();
    for (const child of children ? children.split(' ') : []) ticks += cpuTicks(Number(child));
  }
  return ticks;
}

let clockTicks: number | undefined;
const ticksPerSecond = () => (clockTicks ??= Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()));

/**
 * The pids of the Postgres backends connected to `database` on this
 * machine: Postgres titles each `postgres: <user> <database> <client>
 * <activity>` (its cmdline). None when the server runs elsewhere.
 */
export function postgresBackends(database: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const title = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (title.startsWith('postgres: ') && title.includes(` ${database} `)) pids.push(Number(entry));
    } catch {
      // the process ended between the listing and the read
    }
  }
  return pids;
}

/** cpuMs of each of `pids` still running; a process that has ended is left out. */
export function cpuMsOf(pids: number[]): Map<number, number> {
  const times = new Map<number, number>();
  for (const pid of pids) {
    try {
      times.set(pid, cpuMs(pid));
    } catch {
      // it ended
    }
  }
  return times;
}
