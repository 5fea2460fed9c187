// Types for `cloudflare:workers` in the workers tests: `env` holds the
// bindings of wrangler.toml plus the test variables, `exports` the Worker's
// own entry (src/worker.ts). A script file (no top-level import), so these
// merge into the global `Cloudflare` namespace of @cloudflare/workers-types.
type CellplaneWorkerEnv = import('../../src/worker-platform').WorkerEnv;

declare namespace Cloudflare {
  interface GlobalProps {
    mainModule: typeof import('../../src/worker');
    durableNamespaces: 'EnvironmentStream';
  }
  interface Env extends CellplaneWorkerEnv {}
}
