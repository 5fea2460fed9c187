import type { NodeDatabase } from '../../src/node/database';

type Method = (...args: unknown[]) => unknown;

/**
 * How many statements outside a transaction the driver receives while `run`
 * executes, and how many transactions it opens: enough to tell a request
 * answered in one statement from one that went the transactional way.
 * `run` is given the counts as they grow, to read them midway.
 * (bench/harness.ts records the statements themselves, for the benchmarks.)
 */
export async function countStatements(
  database: NodeDatabase,
  run: (sofar: Readonly<{ statements: number; transactions: number }>) => Promise<unknown>,
): Promise<{ statements: number; transactions: number }> {
  const counts = { statements: 0, transactions: 0 };
  const counting = (original: Method, key: keyof typeof counts): Method =>
    function (this: unknown, ...args: unknown[]) {
      counts[key]++;
      return original.apply(this, args);
    };
  if (database.kind === 'pglite') {
    // drizzle's PGlite driver sends a statement with query() (exec() for raw SQL) and a transaction with transaction()
    const pglite = database.pglite as unknown as Record<'query' | 'exec' | 'transaction', Method>;
    const originals = { query: pglite.query, exec: pglite.exec, transaction: pglite.transaction };
    pglite.query = counting(originals.query, 'statements');
    pglite.exec = counting(originals.exec, 'statements');
    pglite.transaction = counting(originals.transaction, 'transactions');
    try {
      await run(counts);
    } finally {
      Object.assign(pglite, originals);
    }
    return counts;
  }
  // node-postgres: Pool.query for a statement (it checks a client out through connect(callback) itself),
  // and connect() without arguments for a transaction's client
  const pool = database.pool as unknown as Record<'query' | 'connect', Method>;
  const originals = { query: pool.query, connect: pool.connect };
  pool.query = counting(originals.query, 'statements');
  pool.connect = function (this: unknown, ...args: unknown[]) {
    if (args.length === 0) counts.transactions++;
    return originals.connect.apply(this, args);
  };
  try {
    await run(counts);
  } finally {
    Object.assign(pool, originals);
  }
  return counts;
}
