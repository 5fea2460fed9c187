/**
 * `npm run bench`: every benchmark in bench/, one after the other, each on a
 * fresh database; `npm run bench -- entities` runs only the ones named.
 * See bench/README.md for what each measures and the variables it reads.
 */
import { entities } from './entities';
import { foundation } from './foundation';
import { openBench, type Benchmark } from './harness';
import { httpBench } from './http';
import { importBench } from './import';
import { runs } from './runs';
import { stream } from './stream';

const benchmarks: Benchmark[] = [foundation, entities, runs, stream, importBench, httpBench];

async function main(): Promise<void> {
  const wanted = process.argv.slice(2);
  const unknown = wanted.filter((name) => !benchmarks.some((b) => b.name === name));
  if (unknown.length) {
    throw new Error(`unknown benchmark ${unknown.map((n) => `"${n}"`).join(', ')}; known: ${benchmarks.map((b) => b.name).join(', ')}`);
  }
  const selected = wanted.length ? benchmarks.filter((b) => wanted.includes(b.name)) : benchmarks;
  for (const [i, benchmark] of selected.entries()) {
    if (i > 0) console.log('\n');
    const { context, close } = await openBench();
    try {
      await benchmark.run(context);
    } finally {
      await close();
    }
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
