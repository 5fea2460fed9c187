import type { Command } from 'commander';
import type { Column, Output } from '../output';
import { positiveInteger } from './arguments';

/**
 * The keyset-paginated lists (entities, relationships, runs): one page by
 * default, with a note on stderr saying how to get the rest; `--all`
 * follows `X-Next-Cursor` to the end through the SDK's paginate().
 */

export interface PageOptions {
  all?: boolean;
  limit?: number;
  cursor?: string;
}

export function pageOptions(command: Command, maxLimit: number, defaultLimit: number): Command {
  return command
    .option('--limit <n>', `page size, 1–${maxLimit} (server default ${defaultLimit})`, positiveInteger(maxLimit))
    .option('--cursor <cursor>', 'start at this page (the cursor a previous listing printed)')
    .option('--all', 'follow every page to the end');
}

/** The query fields of the page options. */
export const pageQuery = (options: PageOptions) => ({
  limit: options.limit,
  cursor: options.cursor,
});

export async function listItems<T>(
  out: Output,
  what: string,
  options: PageOptions,
  onePage: () => Promise<{ data: T[]; response: Response }>,
  everyPage: () => AsyncIterable<T>,
): Promise<T[]> {
  if (options.all) {
    const items: T[] = [];
    for await (const item of everyPage()) items.push(item);
    return items;
  }
  const { data, response } = await onePage();
  const next = response.headers.get('x-next-cursor');
  if (next) out.info(`more ${what} than this page: add --all for every page, or --cursor ${next} for the next one`);
  return data;
}

/** --json: the API's JSON; otherwise a table, or a note on stderr when there is nothing. */
export function printList<T extends object>(out: Output, what: string, items: T[], columns: Column[]): void {
  if (out.jsonMode) return out.json(items);
  if (items.length === 0) return out.info(`no ${what}`);
  out.table(items as unknown as Record<string, unknown>[], columns);
}
