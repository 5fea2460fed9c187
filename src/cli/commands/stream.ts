import type { StreamEvent } from '../../sdk/stream';
import type { RegisterCommands } from '../context';
import { CliError } from '../errors';
import { paintStatus, type Output } from '../output';
import { nonNegativeInteger } from './arguments';

/**
 * `cellplane stream`: tails the environment's change stream, one line per
 * event (a JSON object per line with --json), until Ctrl-C (exit 0). A
 * dropped connection is reopened with Last-Event-ID, so nothing is missed
 * or repeated; each reconnect is noted on stderr.
 */
export const registerStreamCommand: RegisterCommands = (program, context) => {
  program
    .command('stream')
    .description("tail the current environment's entity changes (Ctrl-C to stop)")
    .option('--type <entityType>', 'only entities of this type')
    .option('--cell <cell>', 'only members of this cell')
    .option('--since <seq>', 'start after this change sequence (the first column; default: from now on)', nonNegativeInteger)
    .action(async (options: { type?: string; cell?: string; since?: string }) => {
      const ctx = context();
      const ref = ctx.env();
      const client = await ctx.client();
      const stop = new AbortController();
      const onInterrupt = () => stop.abort();
      process.once('SIGINT', onInterrupt);
      process.once('SIGTERM', onInterrupt);
      ctx.out.info(`streaming changes of ${ref.org}/${ref.project}/${ref.env}${options.since === undefined ? '' : ` after ${options.since}`} (Ctrl-C to stop)`);
      try {
        for await (const event of client.stream(ref, {
          entityType: options.type,
          cell: options.cell,
          lastEventId: options.since,
          signal: stop.signal,
          onReconnect: ({ attempt, lastEventId, error }) =>
            ctx.out.info(
              `connection lost (${error instanceof Error ? error.message : String(error)}); reconnecting${attempt > 1 ? ` (attempt ${attempt})` : ''}, resuming after ${lastEventId ?? 'the latest change'}`,
            ),
        })) {
          printEvent(ctx.out, event);
          if (event.event === 'end') {
            const reason = (event.data as { reason?: string } | undefined)?.reason ?? 'no reason given';
            throw new CliError(`the server ended the stream: ${reason}`, 'check the token (`cellplane login`) and that the environment still exists, then run `cellplane stream` again');
          }
        }
      } finally {
        process.off('SIGINT', onInterrupt);
        process.off('SIGTERM', onInterrupt);
      }
    });
};

interface ChangeData {
  entity?: { name?: string; entityTypeName?: string; state?: string };
  at?: string;
  reason?: string;
}

function printEvent(out: Output, event: StreamEvent): void {
  if (out.jsonMode) return out.line(JSON.stringify(event));
  const data = (typeof event.data === 'object' && event.data !== null ? event.data : {}) as ChangeData;
  if (event.event === 'resync' || event.event === 'end') return out.info(`${event.event}: ${data.reason ?? JSON.stringify(event.data)}`);
  const entity = data.entity ?? {};
  const parts = [event.id ?? '-', event.event, `${entity.entityTypeName ?? '?'}/${entity.name ?? '?'}`, entity.state ? paintStatus(out.paint, entity.state) : '-', data.at ?? ''];
  out.line(parts.join('  ').trimEnd());
}
