/**
 * `{{ path }}` templates in action triggers (SPEC "Outbound webhook
 * trigger"; DECISIONS §4). The context holds `secrets`, `parameters`,
 * `entity` (id, name, properties) and `run` (id, callbackUrl, callbackToken).
 *
 * A reference that the context does not hold fails the whole interpolation,
 * listing every such reference: a trigger never sends a blank.
 *
 * A string that is exactly one template takes the referenced value as it is
 * (a number stays a number in a JSON payload); a template inside a longer
 * string is replaced by the value's text (JSON for objects and arrays).
 */

export interface InterpolationContext {
  secrets: Record<string, string>;
  parameters: Record<string, unknown>;
  entity: { id: string; name: string; properties: Record<string, unknown> };
  run: { id: string; callbackUrl: string; callbackToken: string };
}

export class InterpolationError extends Error {
  constructor(readonly unknownReferences: string[]) {
    super(`unknown template reference${unknownReferences.length > 1 ? 's' : ''}: ${unknownReferences.join(', ')}`);
    this.name = 'InterpolationError';
  }
}

const TEMPLATE = /\{\{\s*([a-zA-Z0-9_.:/-]+?)\s*\}\}/g;
const WHOLE_TEMPLATE = /^\{\{\s*([a-zA-Z0-9_.:/-]+?)\s*\}\}$/;

/** Every reference in a value (strings, arrays and objects, keys excluded), in order of appearance. */
export function templateReferences(value: unknown): string[] {
  const found: string[] = [];
  walkStrings(value, (text) => {
    for (const match of text.matchAll(TEMPLATE)) found.push(match[1]!);
  });
  return [...new Set(found)];
}

/** The secret names a value refers to, so the engine decrypts exactly those. */
export const referencedSecrets = (value: unknown): string[] =>
  templateReferences(value)
    .filter((reference) => reference.startsWith('secrets.'))
    .map((reference) => reference.slice('secrets.'.length));

function walkStrings(value: unknown, visit: (text: string) => void): void {
  if (typeof value === 'string') visit(value);
  else if (Array.isArray(value)) value.forEach((item) => walkStrings(item, visit));
  else if (value && typeof value === 'object') Object.values(value).forEach((item) => walkStrings(item, visit));
}

const MISSING = Symbol('missing');

function lookup(context: InterpolationContext, reference: string): unknown {
  const [root, ...rest] = reference.split('.');
  if (root === 'secrets') {
    // a secret's name may itself contain dots: everything after `secrets.` is the name
    const name = rest.join('.');
    return Object.hasOwn(context.secrets, name) ? context.secrets[name] : MISSING;
  }
  let current: unknown = (context as unknown as Record<string, unknown>)[root!];
  if (current === undefined || root === undefined || !['parameters', 'entity', 'run'].includes(root)) return MISSING;
  for (const key of rest) {
    if (current === null || typeof current !== 'object' || !Object.hasOwn(current, key)) return MISSING;
    current = (current as Record<string, unknown>)[key];
  }
  return current === undefined ? MISSING : current;
}

const asText = (value: unknown): string => (typeof value === 'string' ? value : JSON.stringify(value));

/**
 * Interpolates every string inside `value`. `encode` transforms each
 * inserted text (e.g. encodeURIComponent for a URL), never the template's
 * own characters.
 */
export function interpolate<T>(value: T, context: InterpolationContext, options: { encode?: (text: string) => string } = {}): T {
  const unknown = templateReferences(value).filter((reference) => lookup(context, reference) === MISSING);
  if (unknown.length > 0) throw new InterpolationError(unknown);
  const encode = options.encode ?? ((text: string) => text);
  const visit = (node: unknown): unknown => {
    if (typeof node === 'string') {
      const whole = WHOLE_TEMPLATE.exec(node);
      if (whole && !options.encode) return lookup(context, whole[1]!);
      return node.replace(TEMPLATE, (_match, reference: string) => encode(asText(lookup(context, reference))));
    }
    if (Array.isArray(node)) return node.map(visit);
    if (node && typeof node === 'object') {
      return Object.fromEntries(Object.entries(node).map(([key, item]) => [key, visit(item)]));
    }
    return node;
  };
  return visit(value) as T;
}

/** Interpolates a string into a string, whatever the referenced values' types. */
export function interpolateText(template: string, context: InterpolationContext, options: { encode?: (text: string) => string } = {}): string {
  const result = interpolate(template, context, options);
  return asText(result);
}
