/**
 * Polls `check` every `intervalMs` until it returns something other than
 * undefined, and resolves with that: for what a running job runner, server
 * process or stream does on its own schedule. Past `timeoutMs` it throws,
 * naming `what` (a text, or a function read then, for a count that moves;
 * it may read it from a server). Node and the Worker suites share it.
 */
export async function eventually<T>(
  check: () => Promise<T | undefined> | T | undefined,
  {
    timeoutMs = 10_000,
    intervalMs = 50,
    what = 'the condition',
  }: { timeoutMs?: number; intervalMs?: number; what?: string | (() => string | Promise<string>) } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${typeof what === 'string' ? what : await what()}: not reached within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
