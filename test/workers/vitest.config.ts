import { cloudflareTest } from '@cloudflare/vitest-pool-workers';
import { defineConfig } from 'vitest/config';

/**
 * The Worker entry inside workerd, with the bindings of wrangler.toml (the
 * Durable Object and the queues exist in miniflare) plus the database the
 * global setup created, reached through the Neon driver and the local
 * WebSocket proxy, as in `npm run dev`.
 */
export default defineConfig({
  plugins: [
    cloudflareTest(({ inject }) => ({
      wrangler: { configPath: '../../wrangler.toml' },
      miniflare: { bindings: { ...inject('workerBindings') } },
    })),
  ],
  test: {
    name: 'workers',
    include: ['**/*.test.ts'],
    globalSetup: ['./global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
