import { describe, expect, it } from 'vitest';
import {
  interpolate,
  interpolateText,
  InterpolationError,
  referencedSecrets,
  templateReferences,
  type InterpolationContext,
} from '../../src/runs/interpolation';

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
