import { z } from '@hono/zod-openapi';
import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { actionRuns, actions } from '../../src/db/schema';
import { ApiError } from '../../src/http/errors';
import { interpolateText, InterpolationError, referencedSecrets } from '../../src/runs/interpolation';
import { Undeliverable, type Sent, type TriggerKind } from '../../src/runs/trigger-kind';
import { registerTriggerKind } from '../../src/runs/trigger-kinds';
import { webhookTriggerKind } from '../../src/runs/trigger-kinds/webhook';
import { createTenant, expectError, mintToken, uniqueSlug, type Tenant } from '../support/fixtures';
import { createTestApi, type TestApi } from '../support/node-app';

/**
 * The seam of src/runs/: a trigger kind is one entry of the registry, and the
 * engine carries its runs as it carries a webhook's. This suite registers a
 * third kind of its own through the public registry API — `recorder`, which
 * "sends" by writing into an array here — and runs it end to end: trigger
 * (its dry run), delivery (send, classify, the retry schedule, `[delivery]`
 * failures, concealed secrets), completion (the callback, its `complete`
 * hook, a move of the entity), with nothing of the engine changed for it.
 *
 * The definition API accepts the kinds the server ships (their schemas make
 * the OpenAPI contract), so the recorder's action is defined as a webhook
 * action and its stored trigger replaced by the recorder's.
 */

const RecorderTrigger = z.strictObject({
  type: z.literal('recorder'),
  /** A template, interpolated at trigger time (dry run) and at each attempt. */
  note: z.string(),
  /** How each attempt's send answers, in turn (the last repeats). */
  answers: z.array(z.enum(['ok', 'busy', 'no', 'broken'])).default(['ok']),
});
type RecorderTrigger = z.output<typeof RecorderTrigger>;

interface Recorded {
  runId: string;
  attempt: number;
  note: string;
  callbackUrl: string;
  callbackToken: string;
}

interface RecorderSent extends Sent {
  answer: 'ok' | 'busy' | 'no';
  note: string;
}

const recorded: Recorded[] = [];

const recorderKind: TriggerKind<RecorderTrigger, RecorderSent> = {
  type: 'recorder',
  schema: RecorderTrigger,
  redact: (trigger) => trigger,
  async prepare(time, trigger) {
    const context = await time.templateContext(referencedSecrets(trigger.note));
    try {
      interpolateText(trigger.note, context);
    } catch (error) {
      if (error instanceof InterpolationError) throw new ApiError('unknown_reference', `the note refers to ${error.unknownReferences.join(', ')}`);
      throw error;
    }
    return { repo: `recorded/${time.run.id.slice(0, 8)}` };
  },
  async send({ trigger, run, number, templateContext }) {
    const context = await templateContext(referencedSecrets(trigger.note));
    const note = interpolateText(trigger.note, context);
    const answer = trigger.answers[Math.min(number, trigger.answers.length) - 1]!;
    // a kind may say anything in its errors: the engine scrubs what the attempt's context concealed
    if (answer === 'broken') throw new Undeliverable(`the recorder broke on "${note}"`);
    recorded.push({ runId: run.id, attempt: number, note, callbackUrl: context.run.callbackUrl, callbackToken: context.run.callbackToken });
    return { httpStatus: null, latencyMs: 0, answer, note };
  },
  classify(sent) {
    if (sent.answer === 'ok') return { kind: 'delivered', columns: { prNumber: recorded.length } };
    if (sent.answer === 'busy') return { kind: 'retryable', problem: `the recorder was busy with "${sent.note}"` };
    return { kind: 'rejected', problem: 'the recorder said no' };
  },
  retryPolicy: () => ({ maxAttempts: 3, backoff: 'fixed', initialDelayMs: 0 }),
  // a callback reporting `{ partial: true }` is progress, not the end
  complete: (_run, report) => ((report.output as { partial?: boolean } | undefined)?.partial ? null : report),
};

describe('a third trigger kind, registered through the registry', () => {
  let api: TestApi;
  let tenant: Tenant;
  let owner: string;
  let proj: string;
  let env: string;

  const call = (method: string, path: string, body?: unknown) => api.call(method, path, { token: owner, body });

  /** An action whose stored trigger is `trigger` (defined as a webhook action, then given the recorder's trigger). */
  const recorderAction = async (trigger: Record<string, unknown>) => {
    const name = uniqueSlug('record');
    const created = await call('POST', `${proj}/actions`, {
      kind: 'Action',
      name,
      entityType: 'vm',
      onSuccess: 'running',
      onFailure: 'failed',
      trigger: { type: 'webhook', url: 'https://hooks.example.com/unused' },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    await api.db
      .update(actions)
      .set({ trigger })
      .where(and(eq(actions.projectId, tenant.project.id), eq(actions.name, name)));
    return name;
  };

  const createEntity = async () => {
    const name = uniqueSlug('vm');
    const created = await call('POST', `${env}/entities`, { kind: 'Entity', entityType: 'vm', name });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    return name;
  };

  const trigger = async (action: string, entity?: string) => {
    const name = entity ?? (await createEntity());
    const run = await call('POST', `${env}/entities/${name}/actions/${action}`);
    expect(run.status, JSON.stringify(run.body)).toBe(202);
    return { id: run.body.id as string, entity: name };
  };

  const getRun = async (id: string) => (await call('GET', `${env}/action-runs/${id}`)).body;

  const callback = (record: Recorded, body: unknown) =>
    api.call('POST', new URL(record.callbackUrl).pathname, { headers: { authorization: `Bearer ${record.callbackToken}` }, body });

  beforeAll(async () => {
    registerTriggerKind(recorderKind);
    api = await createTestApi();
    tenant = await createTenant(api);
    owner = await mintToken(api, tenant, { role: 'owner' });
    proj = `/${tenant.org.slug}/${tenant.project.slug}`;
    env = `${proj}/envs/default`;
    const type = await call('POST', `${proj}/entity-types`, {
      kind: 'EntityType',
      name: 'vm',
      states: ['provisioning', 'running', 'failed'],
      initialState: 'provisioning',
    });
    expect(type.status).toBe(201);
    expect((await call('PUT', `${env}/secrets/recorder-key`, { value: 'rk-0f9e8d7c6b5a' })).status).toBe(201);
  });
  afterAll(() => api?.close());

  it('a type is registered once: a second kind of the same type is refused', () => {
    expect(() => registerTriggerKind(recorderKind)).toThrow(/registered already/);
    expect(() => registerTriggerKind(webhookTriggerKind)).toThrow(/registered already/);
  });

  it('trigger → delivery → callback: sent once with the run, the attempt and its template context; running; then succeeded and the entity moves', async () => {
    const action = await recorderAction({ type: 'recorder', note: 'resize {{ entity.name }} with {{ secrets.recorder-key }}', answers: ['ok'] });
    const run = await trigger(action);
    const pending = await getRun(run.id);
    expect(pending).toMatchObject({ status: 'pending', attempts: [] });
    // the dry run's columns are stored with the run
    const [row] = await api.db.select().from(actionRuns).where(eq(actionRuns.id, run.id));
    expect(row!.repo).toBe(`recorded/${run.id.slice(0, 8)}`);

    await api.jobs.drain();
    const sent = recorded.filter((record) => record.runId === run.id);
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({ attempt: 1, note: `resize ${run.entity} with rk-0f9e8d7c6b5a` });
    expect(new URL(sent[0]!.callbackUrl).pathname).toBe(`/${tenant.org.id}/${tenant.project.id}/envs/${row!.envId}/action-runs/${run.id}/callback`);
    const running = await getRun(run.id);
    expect(running).toMatchObject({ status: 'running', attempts: [{ attempt: 1, outcome: 'delivered', httpStatus: null, error: null }] });
    const [started] = await api.db.select().from(actionRuns).where(eq(actionRuns.id, run.id));
    expect(started!.prNumber).toBe(recorded.length);

    const done = await callback(sent[0]!, { status: 'succeeded', output: { recorded: true } });
    expect(done.status, JSON.stringify(done.body)).toBe(200);
    expect(done.body).toMatchObject({ status: 'succeeded', output: { recorded: true } });
    expect((await call('GET', `${env}/entities/${run.entity}`)).body.state).toBe('running');
    expectError(await callback(sent[0]!, { status: 'succeeded' }), 409, 'run_not_completable');
  });

  it("the kind's dry run answers the trigger: an unknown reference is its 400, and no run is written", async () => {
    const action = await recorderAction({ type: 'recorder', note: '{{ secrets.missing }}', answers: ['ok'] });
    const entity = await createEntity();
    expectError(await call('POST', `${env}/entities/${entity}/actions/${action}`), 400, 'unknown_reference');
    expect((await call('GET', `${env}/action-runs?action=${action}`)).body).toEqual([]);
  });

  it('retryable, then delivered: the retry schedule is the kind\'s policy, and each attempt is recorded', async () => {
    const action = await recorderAction({ type: 'recorder', note: 'n', answers: ['busy', 'busy', 'ok'] });
    const run = await trigger(action);
    await api.jobs.drain();
    const after = await getRun(run.id);
    expect(after.status).toBe('running');
    expect(after.attempts.map((attempt: { outcome: string; error: string | null }) => [attempt.outcome, attempt.error])).toEqual([
      ['retry', 'the recorder was busy with "n"'],
      ['retry', 'the recorder was busy with "n"'],
      ['delivered', null],
    ]);
    expect(recorded.filter((record) => record.runId === run.id).map((record) => record.attempt)).toEqual([1, 2, 3]);
  });

  it('retryable past the policy\'s last attempt: failed, "[delivery] gave up after 3 attempts"', async () => {
    const action = await recorderAction({ type: 'recorder', note: 'n', answers: ['busy'] });
    const run = await trigger(action);
    await api.jobs.drain();
    expect(await getRun(run.id)).toMatchObject({
      status: 'failed',
      error: '[delivery] gave up after 3 attempts; the last one: the recorder was busy with "n"',
    });
  });

  it('rejected: failed at once, "(not retried)"; the entity stays where it is', async () => {
    const action = await recorderAction({ type: 'recorder', note: 'n', answers: ['no'] });
    const run = await trigger(action);
    await api.jobs.drain();
    expect(await getRun(run.id)).toMatchObject({ status: 'failed', error: '[delivery] the recorder said no (not retried)' });
    expect((await call('GET', `${env}/entities/${run.entity}`)).body.state).toBe('provisioning');
  });

  it('Undeliverable: failed with its message, every secret of the attempt scrubbed from it', async () => {
    const action = await recorderAction({ type: 'recorder', note: 'key {{ secrets.recorder-key }}', answers: ['broken'] });
    const run = await trigger(action);
    await api.jobs.drain();
    const failed = await getRun(run.id);
    expect(failed).toMatchObject({ status: 'failed', error: '[delivery] the recorder broke on "key [redacted]"' });
    expect(failed.attempts).toEqual([expect.objectContaining({ outcome: 'failed', error: 'the recorder broke on "key [redacted]"' })]);
  });

  it("the kind's `complete` reads each report first: one it does not take as the end leaves the run running", async () => {
    const action = await recorderAction({ type: 'recorder', note: 'n', answers: ['ok'] });
    const run = await trigger(action);
    await api.jobs.drain();
    const record = recorded.find((candidate) => candidate.runId === run.id)!;
    const progress = await callback(record, { status: 'succeeded', output: { partial: true } });
    expect(progress.status, JSON.stringify(progress.body)).toBe(200);
    expect(progress.body.status).toBe('running');
    const done = await callback(record, { status: 'failed', error: 'recording lost' });
    expect(done.body).toMatchObject({ status: 'failed', error: 'recording lost' });
    expect((await call('GET', `${env}/entities/${run.entity}`)).body.state).toBe('failed');
  });

  it("a move of the entity to the action's onSuccess completes a run of this kind too", async () => {
    const action = await recorderAction({ type: 'recorder', note: 'n', answers: ['ok'] });
    const run = await trigger(action);
    await api.jobs.drain();
    expect((await call('PUT', `${env}/entities/${run.entity}`, { state: 'running' })).status).toBe(200);
    expect((await getRun(run.id)).status).toBe('succeeded');
  });

  it('a kind the server does not know: 501 not_implemented at trigger time, and a run of it fails at delivery', async () => {
    const action = await recorderAction({ type: 'carrier-pigeon', note: 'n' });
    const entity = await createEntity();
    expectError(await call('POST', `${env}/entities/${entity}/actions/${action}`), 501, 'not_implemented');
    // the definition shows its type only: nothing else of it can be vouched for
    expect((await call('GET', `${proj}/actions/${action}`)).body.trigger).toEqual({ type: 'carrier-pigeon' });

    const recorder = await recorderAction({ type: 'recorder', note: 'n', answers: ['ok'] });
    const run = await trigger(recorder);
    await api.db.update(actionRuns).set({ trigger: { type: 'carrier-pigeon', note: 'n' } }).where(eq(actionRuns.id, run.id));
    await api.jobs.drain();
    expect(await getRun(run.id)).toMatchObject({ status: 'failed', error: '[delivery] "carrier-pigeon" triggers are not available on this server' });
  });

  it('the pull-request kind is an entry of the same registry: its dry run at trigger time, its columns on the run', async () => {
    const created = await call('POST', `${proj}/actions`, {
      kind: 'Action',
      name: uniqueSlug('open-pr'),
      entityType: 'vm',
      trigger: { type: 'pull-request', repo: 'Acme/Infra', title: 't', files: [{ path: 'a.tf', content: 'x' }] },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const entity = await createEntity();
    const response = await call('POST', `${env}/entities/${entity}/actions/${created.body.name}`);
    expect(response.status, JSON.stringify(response.body)).toBe(202);
    expect(response.body).toMatchObject({ status: 'pending', repo: 'acme/infra', prNumber: null });
    // its whole life against a local GitHub: test/node/pull-request-runs.test.ts
  });
});
