import { describe, expect, it } from 'vitest';
import { attemptSignal } from '../../src/runs/attempt-signal';

/** The signal of one webhook attempt (src/runs/attempt-signal.ts), on real timers. */
describe('an attempt’s signal', () => {
  const settle = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  it('aborts with a TimeoutError once its time is up, as AbortSignal.timeout does', async () => {
    const { signal, release } = attemptSignal(20);
    expect(signal.aborted).toBe(false);
    await settle(60);
    expect(signal.aborted).toBe(true);
    expect((signal.reason as DOMException).name).toBe('TimeoutError');
    expect(signal.reason).toBeInstanceOf(DOMException);
    release();
  });

  it('aborts with the stop signal’s reason when the host stops, and at once when it had stopped already', () => {
    const stop = new AbortController();
    const { signal, release } = attemptSignal(10_000, stop.signal);
    const reason = new Error('stopping');
    stop.abort(reason);
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBe(reason);
    release();

    const late = attemptSignal(10_000, stop.signal);
    expect(late.signal.aborted).toBe(true);
    expect(late.signal.reason).toBe(reason);
    late.release();
  });

  it('once released, neither its time nor the stop signal aborts it', async () => {
    const stop = new AbortController();
    const { signal, release } = attemptSignal(20, stop.signal);
    release();
    await settle(60);
    stop.abort(new Error('stopping'));
    expect(signal.aborted).toBe(false);
  });

  it('leaves nothing registered on the stop signal after release, however many attempts came and went', () => {
    const stop = new AbortController();
    let listeners = 0;
    const add = stop.signal.addEventListener.bind(stop.signal);
    const remove = stop.signal.removeEventListener.bind(stop.signal);
    stop.signal.addEventListener = (...args: Parameters<AbortSignal['addEventListener']>) => (listeners++, add(...args));
    stop.signal.removeEventListener = (...args: Parameters<AbortSignal['removeEventListener']>) => (listeners--, remove(...args));
    for (let i = 0; i < 1000; i++) attemptSignal(10_000, stop.signal).release();
    expect(listeners).toBe(0);
  });
});
