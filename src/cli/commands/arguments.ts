import { readFileSync } from 'node:fs';
import { InvalidArgumentError } from 'commander';
import { parse as parseYaml } from 'yaml';
import { UsageError } from '../errors';

/**
 * Parsers for option values shared by the commands. A bad value is a
 * commander InvalidArgumentError (exit 2, with the option named) or a
 * UsageError, never a request the API has to refuse.
 */

/** For repeatable options: `--label a:b --label c:d`. */
export const collect = (value: string, previous: string[] = []): string[] => [...previous, value];

export function positiveInteger(max: number) {
  return (value: string): number => {
    if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > max) throw new InvalidArgumentError(`give a whole number from 1 to ${max}.`);
    return Number(value);
  };
}

export function nonNegativeInteger(value: string): string {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError('give a whole number (a change sequence, as the stream prints it).');
  return value;
}

/** An instant: ISO 8601 (`2026-11-21T10:00:00Z`), sent as the API expects it. */
export function instant(value: string): string {
  const time = Date.parse(value);
  if (!/^\d{4}-\d{2}-\d{2}/.test(value) || Number.isNaN(time)) throw new InvalidArgumentError('give an ISO 8601 instant such as 2026-11-21T10:00:00Z.');
  return new Date(time).toISOString();
}

/** `key:value` or `key=value` → [key, value]; the first `=`, else the first `:`, separates them. */
export function labelPair(text: string, option: string): [string, string] {
  const at = text.includes('=') ? text.indexOf('=') : text.indexOf(':');
  if (at <= 0) throw new UsageError(`${option} "${text}" is not key:value (or key=value): give it as ${option} team:payments`);
  return [text.slice(0, at), text.slice(at + 1)];
}

/**
 * `key=value` (a string) or `key:=json` (any JSON value: `replicas:=3`,
 * `tags:=["a","b"]`), as httpie writes them: a value is never guessed to be
 * a number, so `--param version=10` stays the string "10".
 */
export function valuePair(text: string, option: string): [string, unknown] {
  const typed = /^([^=:]+):=(.*)$/s.exec(text);
  if (typed) {
    try {
      return [typed[1]!, JSON.parse(typed[2]!)];
    } catch {
      throw new UsageError(`${option} "${text}": after := comes JSON (3, true, "text", [1,2], {"a":1}); for a plain string write ${typed[1]}=<value>`);
    }
  }
  const at = text.indexOf('=');
  if (at <= 0) throw new UsageError(`${option} "${text}" is not key=value (or key:=json): give it as ${option} size=small`);
  return [text.slice(0, at), text.slice(at + 1)];
}

export function valuePairs(texts: string[] | undefined, option: string): Record<string, unknown> {
  return Object.fromEntries((texts ?? []).map((text) => valuePair(text, option)));
}

export function labelPairs(texts: string[] | undefined, option: string): Record<string, string> {
  return Object.fromEntries((texts ?? []).map((text) => labelPair(text, option)));
}

/** A JSON or YAML file holding one map (`--params-file`). */
export function readMapFile(path: string, option: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new UsageError(`${option} ${path}: cannot read it (${(error as NodeJS.ErrnoException).code ?? String(error)}): check the path`);
  }
  let value: unknown;
  try {
    value = parseYaml(text);
  } catch (error) {
    throw new UsageError(`${option} ${path} is neither JSON nor YAML (${(error as Error).message.split('\n')[0]}): fix the file`);
  }
  if (value === null || value === undefined) return {};
  if (typeof value !== 'object' || Array.isArray(value)) throw new UsageError(`${option} ${path} must hold one map of names to values, such as {"size": "large"}`);
  return value as Record<string, unknown>;
}
