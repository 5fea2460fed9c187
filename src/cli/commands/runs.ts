import { InvalidArgumentError } from 'commander';
import type { Schemas } from '../../sdk/client';
import type { RegisterCommands } from '../context';
import { CliError } from '../errors';
import { paintStatus, showRecord, type Output } from '../output';
import { collect, instant, positiveInteger, readMapFile, valuePairs } from './arguments';
import { listItems, pageOptions, pageQuery, printList, type PageOptions } from './listing';

/**
 * `cellplane runs trigger|list|get|cancel`. `trigger --wait` follows the
 * run to succeeded, failed or cancelled, printing each status change on
 * stderr, and exits 1 unless it succeeded.
 */

const RUN_STATUSES = ['pending', 'running', 'succeeded', 'failed', 'cancelled'];

function runStatus(value: string, previous: string[] = []): string[] {
  if (!RUN_STATUSES.includes(value)) throw new InvalidArgumentError(`give one of ${RUN_STATUSES.join(', ')}.`);
  return [...previous, value];
}

const RUN_FIELDS = ['id', 'actionName', 'status', 'entityId', 'parameters', 'triggeredBy', 'createdAt', 'startedAt', 'completedAt', 'error', 'output', 'prUrl'];

function showRun(out: Output, run: Schemas['ActionRun']): void {
  showRecord(out, { ...run, status: paintStatus(out.paint, run.status) }, RUN_FIELDS.filter((key) => key in run));
  if (run.attempts.length > 0) out.line(`${out.paint.bold('attempts:')} ${run.attempts.length}`);
}

interface TriggerOptions {
  param?: string[];
  paramsFile?: string;
  idempotencyKey?: string;
  wait?: boolean;
  interval: number;
}

export const registerRunCommands: RegisterCommands = (program, context) => {
  const runs = program.command('runs').description('action runs of the current environment');

  runs
    .command('trigger')
    .description('trigger an action on an entity')
    .argument('<entity>')
    .argument('<action>')
    .option('--param <key=value>', 'a parameter: key=text, or key:=json for numbers, booleans, lists (repeatable; wins over --params-file)', collect)
    .option('--params-file <file>', 'parameters from a JSON or YAML map')
    .option('--idempotency-key <key>', 'a retry with the same key returns the same run instead of a second one')
    .option('--wait', 'follow the run to its end; exit 1 unless it succeeded')
    .option('--interval <ms>', 'with --wait: how often to look, in milliseconds', positiveInteger(3_600_000), 1000)
    .action(async (entity: string, action: string, options: TriggerOptions) => {
      const ctx = context();
      const ref = ctx.env();
      const parameters = {
        ...(options.paramsFile === undefined ? {} : readMapFile(options.paramsFile, '--params-file')),
        ...valuePairs(options.param, '--param'),
      };
      const client = await ctx.client();
      const body = options.param === undefined && options.paramsFile === undefined ? {} : { parameters };
      const run = await client.trigger(ref, entity, action, body, { idempotencyKey: options.idempotencyKey });
      if (!options.wait) {
        if (ctx.out.jsonMode) return ctx.out.json(run);
        ctx.out.line(`run ${run.id}: ${action} on ${entity}, ${paintStatus(ctx.out.paint, run.status)}`);
        ctx.out.info(`follow it: cellplane runs get ${run.id} (or trigger with --wait)`);
        return;
      }
      ctx.out.info(`run ${run.id}: ${run.status}`);
      let last = run.status;
      const stop = new AbortController();
      const onInterrupt = () => stop.abort(new Error('interrupted'));
      process.once('SIGINT', onInterrupt);
      let final: Schemas['ActionRun'];
      try {
        final = await client.waitForRun(ref, run.id, {
          intervalMs: options.interval,
          signal: stop.signal,
          onUpdate: (update) => {
            if (update.status === last) return;
            ctx.out.info(`run ${run.id}: ${last} → ${paintStatus(ctx.out.paintErr, update.status)}`);
            last = update.status;
          },
        });
      } catch (error) {
        if (stop.signal.aborted) throw new CliError(`stopped waiting for run ${run.id}; it goes on (${last})`, `follow it with \`cellplane runs get ${run.id}\``);
        throw error;
      } finally {
        process.off('SIGINT', onInterrupt);
      }
      if (ctx.out.jsonMode) ctx.out.json(final);
      else showRun(ctx.out, final);
      if (final.status !== 'succeeded') {
        throw new CliError(`run ${final.id} ${final.status}${final.error ? `: ${final.error}` : ''}`, `see the run and its delivery attempts: cellplane runs get ${final.id}`);
      }
    });

  pageOptions(
    runs
      .command('list')
      .description('list runs, newest first (one page; --all for every page)')
      .option('--status <status>', `only runs in this status (repeatable): ${RUN_STATUSES.join(', ')}`, runStatus)
      .option('--entity <name>', 'only runs triggered on this entity')
      .option('--action <name>', 'only runs of this action')
      .option('--since <instant>', 'only runs created at or after this ISO 8601 instant', instant),
    500,
    50,
  ).action(async (options: PageOptions & { status?: string[]; entity?: string; action?: string; since?: string }) => {
    const ctx = context();
    const { org, project, env } = ctx.env();
    const client = await ctx.client();
    const init = {
      params: {
        path: { o: org, p: project, envName: env },
        query: {
          status: options.status as Schemas['ActionRunStatus'][],
          entity: options.entity,
          action: options.action,
          since: options.since,
          ...pageQuery(options),
        },
      },
    };
    const items = await listItems(
      ctx.out,
      'runs',
      options,
      () => client.request('get', '/{o}/{p}/envs/{envName}/action-runs', init),
      () => client.paginate('/{o}/{p}/envs/{envName}/action-runs', init),
    );
    printList(ctx.out, 'runs', items, [
      { key: 'id', header: 'ID' },
      { key: 'actionName', header: 'ACTION' },
      { key: 'entityName', header: 'ENTITY' },
      { key: 'status', header: 'STATUS', format: (value) => paintStatus(ctx.out.paint, String(value)) },
      { key: 'createdAt', header: 'CREATED' },
      { key: 'completedAt', header: 'COMPLETED' },
    ]);
  });

  runs
    .command('get')
    .description('show a run with its delivery attempts')
    .argument('<id>')
    .action(async (id: string) => {
      const ctx = context();
      const { org, project, env } = ctx.env();
      const run = await (await ctx.client()).GET('/{o}/{p}/envs/{envName}/action-runs/{id}', { params: { path: { o: org, p: project, envName: env, id } } });
      if (ctx.out.jsonMode) return ctx.out.json(run);
      showRun(ctx.out, run);
    });

  runs
    .command('cancel')
    .description('cancel a pending run')
    .argument('<id>')
    .action(async (id: string) => {
      const ctx = context();
      const { org, project, env } = ctx.env();
      const run = await (await ctx.client()).DELETE('/{o}/{p}/envs/{envName}/action-runs/{id}', { params: { path: { o: org, p: project, envName: env, id } } });
      if (ctx.out.jsonMode) return ctx.out.json(run);
      ctx.out.line(`run ${run.id} ${paintStatus(ctx.out.paint, run.status)}`);
    });
};
