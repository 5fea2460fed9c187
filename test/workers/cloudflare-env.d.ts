// Types for `cloudflare:workers` in the workers tests: `env` holds the
// bindings of wrangler.toml plus the test variables, `exports` the Worker's
// own entry (src/worker.ts).
declare namespace Cloudflare {
  interface GlobalProps {
    mainModule: typeof import('../../src/worker');
    durableNamespaces: 'EnvironmentStream';
  }
  interface Env extends import('../../src/worker-platform').WorkerEnv {}
}
