/**
 * Polls `check` until it returns something other than undefined, and
 * resolves with that: for what a running job runner, server process or
 * stream does on its own schedule. Past `timeoutMs` it throws, naming
 * `what` (a text, or a function read then, for a count that moves).
 */
export async function eventually<T>(
  check: () => Promise<T | undefined> | T | undefined,
  { timeoutMs = 10_000, what = 'the condition' }: { timeoutMs?: number; what?: string | (() => string) } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${typeof what === 'string' ? what : what()}: not reached within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
