import { describe, expect, it } from 'vitest';
import {
  interpolate,
  interpolateText,
  InterpolationError,
  referencedSecrets,
  templateReferences,
  type InterpolationContext,
} from '../../src/runs/interpolation';
import { interpolateTrigger, type WebhookTrigger } from '../../src/runs/trigger-kinds/webhook';

const context: InterpolationContext = {
  secrets: { 'api-token': 's3cr3t', 'dotted.name': 'dot' },
  parameters: { replicas: 3, region: 'eu-west-1', flags: { canary: true } },
  entity: { id: 'e-1', name: 'checkout/api', properties: { tier: 'gold', ports: [80, 443] } },
  run: { id: 'r-1', callbackUrl: 'https://api.example.com/cb', callbackToken: 'cbt' },
};

describe('interpolation', () => {
  it('resolves every context root SPEC and DECISIONS name', () => {
    expect(
      interpolateText(
        '{{ secrets.api-token }} {{parameters.region}} {{ entity.id }} {{ entity.name }} {{ entity.properties.tier }} {{ run.id }} {{ run.callbackUrl }} {{ run.callbackToken }}',
        context,
      ),
    ).toBe('s3cr3t eu-west-1 e-1 checkout/api gold r-1 https://api.example.com/cb cbt');
  });

  it('keeps the type of a value that is a whole string, and writes text inside longer strings', () => {
    const payload = interpolate(
      { replicas: '{{ parameters.replicas }}', flags: '{{ parameters.flags }}', note: 'x{{ parameters.replicas }}', list: ['{{ entity.properties.ports }}'] },
      context,
    );
    expect(payload).toEqual({ replicas: 3, flags: { canary: true }, note: 'x3', list: [[80, 443]] });
    expect(interpolateText('ports={{ entity.properties.ports }}', context)).toBe('ports=[80,443]');
  });

  it('encodes inserted values only, e.g. into a URL', () => {
    expect(interpolateText('https://hooks.example.com/{{ entity.name }}?r={{ parameters.region }}', context, { encode: encodeURIComponent })).toBe(
      'https://hooks.example.com/checkout%2Fapi?r=eu-west-1',
    );
  });

  it('fails on every unknown reference at once, never sending a blank', () => {
    const attempt = () => interpolate({ a: '{{ secrets.missing }}', b: '{{ parameters.nope }}', c: '{{ entity.properties.tier.deeper }}', d: '{{ whatever.x }}' }, context);
    expect(attempt).toThrow(InterpolationError);
    try {
      attempt();
    } catch (error) {
      expect((error as InterpolationError).unknownReferences).toEqual([
        'secrets.missing',
        'parameters.nope',
        'entity.properties.tier.deeper',
        'whatever.x',
      ]);
      // the message names references, never values
      expect((error as Error).message).not.toContain('s3cr3t');
    }
  });

  it('does not reach into prototypes', () => {
    expect(() => interpolateText('{{ parameters.constructor }}', context)).toThrow(InterpolationError);
    expect(() => interpolateText('{{ entity.properties.__proto__ }}', context)).toThrow(InterpolationError);
  });

  it('lists references and the secrets to decrypt', () => {
    const trigger = { url: 'https://x/{{ entity.name }}', headers: { a: 'Bearer {{ secrets.api-token }}' }, payload: { d: '{{ secrets.dotted.name }}' } };
    expect(templateReferences(trigger)).toEqual(['entity.name', 'secrets.api-token', 'secrets.dotted.name']);
    expect(referencedSecrets(trigger)).toEqual(['api-token', 'dotted.name']);
    expect(interpolate(trigger.payload, context)).toEqual({ d: 'dot' });
  });

  it('leaves strings without templates and non-string values alone', () => {
    expect(interpolate({ n: 1, b: false, z: null, s: 'plain {braces}' }, context)).toEqual({ n: 1, b: false, z: null, s: 'plain {braces}' });
  });
});

describe('a webhook trigger interpolated (interpolateTrigger)', () => {
  const trigger = (fields: Partial<WebhookTrigger>): WebhookTrigger => ({
    type: 'webhook',
    url: 'https://ci.example.com/hooks/{{ entity.name }}',
    method: 'POST',
    retry: { maxAttempts: 3, backoff: 'exponential', initialDelayMs: 1000 },
    ...fields,
  });

  it('resolves the URL (encoded), the payload, the headers and the signing secret in one pass', () => {
    const { trigger: resolved, signingSecret } = interpolateTrigger(
      trigger({ payload: { region: '{{ parameters.region }}', replicas: '{{ parameters.replicas }}' }, headers: { 'x-run': '{{ run.id }}' }, signingSecret: '{{ secrets.api-token }}' }),
      context,
    );
    expect(resolved.url).toBe('https://ci.example.com/hooks/checkout%2Fapi');
    expect(resolved.payload).toEqual({ region: 'eu-west-1', replicas: 3 });
    expect(resolved.headers).toEqual({ 'x-run': 'r-1' });
    expect(signingSecret).toBe('s3cr3t');
  });

  it('names every unknown reference of every part at once: URL, payload, headers and signing secret', () => {
    let thrown: unknown;
    try {
      interpolateTrigger(
        trigger({
          url: 'https://ci.example.com/{{ parameters.nope }}',
          payload: { a: '{{ entity.properties.missing }}' },
          headers: { 'x-a': '{{ run.unknown }}' },
          signingSecret: '{{ secrets.absent }}',
        }),
        context,
      );
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(InterpolationError);
    expect((thrown as InterpolationError).unknownReferences.sort()).toEqual(['entity.properties.missing', 'parameters.nope', 'run.unknown', 'secrets.absent']);
  });
});
