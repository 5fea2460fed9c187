import { CellplaneError } from '../sdk/errors';

/**
 * The CLI's two own errors and the one place any error becomes the lines
 * printed on stderr and the exit code (docs/cli.md, "Exit codes"): 0 ok,
 * 1 an API or network error or a refusal, 2 a usage error. Every message
 * ends with what to do next.
 */

/** Bad flags, missing settings: exit 2. The message says what to do next. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** Anything else the CLI refuses or fails at: exit 1. `hint` is printed on its own line after the message. */
export class CliError extends Error {
  override readonly name = 'CliError';
  constructor(
    message: string,
    readonly hint?: string,
  ) {
    super(message);
  }
}

export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

/** What the error report may say about the target: where requests went and for which org/project/env. */
export interface ErrorScene {
  /** `http://127.0.0.1:3000 (from env SERVICE_BASE_URL)`, or `the local database in .cellplane`. */
  target?: string;
  /** `org acme, project platform, env default`, as far as they are known. */
  scope?: string;
}

export interface ErrorReport {
  code: number;
  /** The message, then a `hint:` line, then (SERVICE_DEBUG) the request id, status and body. */
  lines: string[];
}

/** Turns any thrown value into its exit code and stderr lines. Never prints a token: API answers carry none. */
export function reportError(error: unknown, options: { debug: boolean; scene?: ErrorScene }): ErrorReport {
  if (error instanceof UsageError) return { code: EXIT_USAGE, lines: [`error: ${error.message}`] };
  if (error instanceof CliError) {
    return { code: EXIT_FAILURE, lines: [`error: ${error.message}`, ...(error.hint ? [`hint: ${error.hint}`] : [])] };
  }
  if (error instanceof CellplaneError) {
    const lines = [`error: ${error.message}${error.code && error.status !== 0 ? ` (${error.status} ${error.code})` : ''}`];
    // details the message already says are not repeated
    for (const detail of error.details ?? []) {
      if (!error.message.includes(detail.message)) lines.push(`  ${detail.path ? `${detail.path}: ` : ''}${detail.message}`);
    }
    lines.push(`hint: ${hintFor(error, options.scene ?? {})}`);
    if (options.debug) {
      lines.push(`debug: request ${error.request.method} ${error.request.url}`);
      lines.push(`debug: status ${error.status}`);
      lines.push(`debug: request id ${error.requestId ?? '(none)'}`);
      if (error.body !== undefined) lines.push(`debug: body ${typeof error.body === 'string' ? error.body : JSON.stringify(error.body)}`);
      if (error.status === 0 && error.cause !== undefined) lines.push(`debug: cause ${describeCause(error.cause)}`);
    } else if (error.status >= 500 && error.requestId) {
      lines.push(`request id: ${error.requestId}`);
    }
    return { code: EXIT_FAILURE, lines };
  }
  const message = error instanceof Error ? error.message : String(error);
  const lines = [`error: ${message}`, 'hint: this is unexpected; rerun with SERVICE_DEBUG=1 and report the output'];
  if (options.debug && error instanceof Error && error.stack) lines.push(`debug: ${error.stack}`);
  return { code: EXIT_FAILURE, lines };
}

/** What to do next, by the API's code where one says more than its status. */
const HINTS_BY_CODE: Record<string, string> = {
  org_suspended: 'the organization is suspended: ask an administrator of the service',
  cell_scope_violation: "the token is limited to some cells and this is outside them: use a token without cell scopes (`cellplane tokens create`)",
  already_exists: 'it already exists: `get` it, or pick another name',
  invalid_state: 'use one of the states the message lists (`cellplane entity-types get <type>` shows them all)',
  installation_claimed: 'another organization holds it: ask its owners to release it',
  still_referenced: 'something still uses it: delete or change what refers to it first',
  transition_not_allowed: 'the entity type does not allow this move: `cellplane entity-types get <type>` shows its states and transitions',
  constraint_violation: 'a constraint of the type refuses it: `cellplane entity-types get <type>` (or relationship-types) shows the constraints',
  cardinality_violation: 'the relationship type allows no more of these: `cellplane relationship-types get <type>` shows its cardinality',
  membership_derived: "the cell's members follow its selector: change the entity or the cell's membership instead",
  action_unavailable: "the action's conditions do not hold for this entity: `cellplane entities get <name>` shows its state",
  run_not_cancellable: 'only a pending run can be cancelled: `cellplane runs get <id>` shows its status',
  run_not_completable: 'the run has ended already: `cellplane runs get <id>` shows how',
  idempotency_key_reused: 'use a new --idempotency-key, or repeat the first trigger exactly (same entity, action and parameters)',
  resync_required: 'that point is older than the server keeps: start again without --since',
  rate_limited: 'too many requests: wait a minute and run the command again',
  payload_too_large: 'the request is over 1 MiB: send less at once',
};

function hintFor(error: CellplaneError, scene: ErrorScene): string {
  const byCode = HINTS_BY_CODE[error.code];
  if (byCode) return byCode;
  const scope = scene.scope ? ` (now ${scene.scope})` : '';
  switch (error.status) {
    case 0:
      return `check the API address${scene.target ? ` ${scene.target}` : ''}: --base-url, SERVICE_BASE_URL or \`cellplane config set baseUrl <url>\`, and that the server is up`;
    case 400:
      return error.details?.length ? 'fix the values the message names and run the command again' : 'check the arguments (`cellplane <command> --help`) and run the command again';
    case 401:
      return 'check the token: pass --token, set SERVICE_TOKEN, or run `cellplane login`';
    case 403:
      return "the token's role does not allow this: use a token with a higher role (an admin can mint one with `cellplane tokens create --role <role>`), or one not pinned to another environment";
    case 404:
      return `check --org, --project, --env and the names given${scope}; \`cellplane <resource> list\` shows what exists`;
    case 409:
      return 'it conflicts with what is there now: read the message above, change that, and run the command again';
    case 410:
      return 'it is gone: list what exists and start from there';
    default:
      if (error.status >= 500) return 'the server failed: run the command again later, or quote the request id to its operator (SERVICE_DEBUG=1 shows more)';
      return 'rerun with SERVICE_DEBUG=1 to see the request id and the full answer';
  }
}

function describeCause(cause: unknown): string {
  if (!(cause instanceof Error)) return String(cause);
  const inner = cause.cause instanceof Error ? `: ${cause.cause.message}` : '';
  return `${cause.message}${inner}`;
}
