import { existsSync, readFileSync } from 'node:fs';
import { dirname, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * The CLI starts fast because a remote command loads no server code: the
 * static import graph of src/cli/main.ts (which bin/cellplane.mjs loads) stays inside src/cli and
 * src/sdk (and packages). Local mode reaches the server only through
 * context.ts's dynamic `import('./local')`. Walked from the sources, so a
 * new static import of server code fails here.
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The relative modules `file` imports statically (`import … from`, `export … from`, bare `import '…'`), resolved to files. */
function staticImports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const specifiers = [...text.matchAll(/^\s*(?:import|export)\s+(?:type\s+)?(?:[^'"]*?\sfrom\s+)?['"]([^'"]+)['"]/gm)]
    .filter((match) => !/^\s*(?:import|export)\s+type\s/.test(match[0]))
    .map((match) => match[1]!);
  return specifiers
    .filter((specifier) => specifier.startsWith('.'))
    .map((specifier) => {
      const base = resolve(dirname(file), specifier);
      const found = [base, `${base}.ts`, `${base}.mjs`, resolve(base, 'index.ts')].find((candidate) => existsSync(candidate) && !candidate.endsWith('/'));
      if (!found) throw new Error(`${relative(ROOT, file)} imports ${specifier}, which does not resolve`);
      return found;
    });
}

describe('cellplane start-up', () => {
  it('the static import graph of main.ts reaches only src/cli and src/sdk; local mode is a dynamic import', () => {
    const seen = new Set<string>();
    expect(readFileSync(resolve(ROOT, 'bin/cellplane.mjs'), 'utf8')).toContain("await import('../src/cli/main.ts')");
    const queue = [resolve(ROOT, 'src/cli/main.ts')];
    while (queue.length > 0) {
      const file = queue.pop()!;
      if (seen.has(file)) continue;
      seen.add(file);
      queue.push(...staticImports(file));
    }
    const files = [...seen].map((file) => relative(ROOT, file)).sort();
    expect(files).toContain('src/cli/main.ts');
    expect(files).toContain('src/sdk/client.ts');
    expect(files.filter((file) => !/^(src\/cli\/|src\/sdk\/)/.test(file))).toEqual([]);
    expect(files).not.toContain('src/cli/local.ts');
    expect(readFileSync(resolve(ROOT, 'src/cli/context.ts'), 'utf8')).toContain("await import('./local')");
  });
});
