import { CodehostApiError, codehostApp } from '../codehost/app';
import { grantingInstallation } from '../codehost/installations';
import type { Config } from '../config';
import { recordAudit } from '../db/audit';
import type { Queryable } from '../db/client';
import { ApiError } from '../http/errors';
import type { Logger } from '../logger';
import type { Clock } from '../platform';
import type { RunRow } from './run-context';

/**
 * Which credential a pull-request run's GitHub calls use (SPEC
 * Authentication 13), decided at dispatch time, for the opening of the pull
 * request and for the post-merge repository_dispatch alike:
 *
 *   1. an installation of the GitHub App that grants the repository (an
 *      active installation of the run's organization whose granted
 *      repositories hold it) and no `auth.token`: an installation token
 *      (preferred);
 *   2. no installation and `auth.token`: that token (a literal, or the
 *      secret it references, of the run's environment);
 *   3. both: the installation token, and a structured warning (no value);
 *   4. neither: the run fails, with a message naming both remedies.
 *
 * And the audit event every dispatch writes, `github-dispatch-attempted`
 * (SPEC "Audit events"): credential type, repository, installation id,
 * outcome. Never a token.
 */

export type CodehostCredential =
  | { type: 'installation'; token: string; installationId: number }
  | { type: 'token'; token: string };

export type CredentialResolution =
  | { ok: true; credential: CodehostCredential }
  /** `mint`: GitHub refused or failed to mint the installation's token (retryable or not); absent: no credential applies (case 4). */
  | { ok: false; problem: string; installationId?: number; mint?: CodehostApiError };

export interface CredentialDeps {
  db: Queryable;
  config: Config;
  clock: Clock;
  logger: Logger;
}

/** What a dispatch is for: the pull request of a run's delivery, or the repository_dispatch after its merge. */
export type DispatchPurpose = 'pull-request' | 'repository-dispatch';

/**
 * The credential for `repo` (`owner/name`). `staticToken` resolves
 * `trigger.auth.token`; it is only called when no installation applies,
 * so a token reference the installation makes moot is never interpolated
 * (a secret it names that is gone does not fail the run). A failure to mint an
 * installation token is returned with GitHub's error (retryable or not).
 */
export async function resolveCodehostCredential(
  deps: CredentialDeps,
  input: { run: Pick<RunRow, 'id' | 'orgId'>; repo: string; purpose: DispatchPurpose; hasStaticToken: boolean; staticToken: () => string },
): Promise<CredentialResolution> {
  const [owner, name] = input.repo.split('/') as [string, string];
  // without the App configured no installation can be used, whatever rows exist
  const installationId = deps.config.codehostApp ? await grantingInstallation(deps.db, input.run.orgId, owner, name) : null;
  if (installationId !== null) {
    let app;
    try {
      app = await codehostApp(deps);
    } catch (error) {
      // a private key that cannot be used: the reason names the variable, never the key
      if (error instanceof ApiError) return { ok: false, problem: error.message };
      throw error;
    }
    if (input.hasStaticToken) {
      deps.logger.warn('pull-request trigger: an installation of the GitHub App grants the repository and trigger.auth.token is set; the installation token is used', {
        runId: input.run.id,
        repo: input.repo,
        purpose: input.purpose,
        installationId,
        credentialType: 'installation',
        ignored: 'trigger.auth.token',
      });
    }
    try {
      const { token } = await app.installationToken(installationId);
      return { ok: true, credential: { type: 'installation', token, installationId } };
    } catch (error) {
      if (!(error instanceof CodehostApiError)) throw error;
      return { ok: false, problem: `could not get a token for installation ${installationId} of the GitHub App: ${error.message}`, installationId, mint: error };
    }
  }
  if (input.hasStaticToken) return { ok: true, credential: { type: 'token', token: input.staticToken() } };
  return {
    ok: false,
    problem:
      `no GitHub credential for ${input.repo}: link the repository through the GitHub App ` +
      `(install the App on it for this organization, then PUT /{org}/{project}/github/repos/${input.repo}), ` +
      'or supply trigger.auth.token (a {{ secrets.<name> }} reference to a token with contents and pull requests write access)' +
      (deps.config.codehostApp ? '' : '; the GitHub App is not configured on this server (CODEHOST_APP_*), so only trigger.auth.token can be used here'),
  };
}

export type CredentialType = CodehostCredential['type'] | 'none';

/** The audit event of one dispatch (SPEC "Audit events"): names and ids only. */
export async function recordDispatchAttempt(
  db: Queryable,
  run: Pick<RunRow, 'id' | 'orgId' | 'projectId' | 'envId' | 'actionName'>,
  attempt: {
    purpose: DispatchPurpose;
    repo: string;
    credentialType: CredentialType;
    installationId?: number;
    outcome: string;
    httpStatus?: number | null;
    attempt?: number;
    prNumber?: number;
    eventType?: string;
  },
): Promise<void> {
  await recordAudit(db, {
    action: 'github-dispatch-attempted',
    actor: { type: 'system', id: null },
    orgId: run.orgId,
    target: { type: 'action-run', id: run.id },
    data: {
      credential_type: attempt.credentialType,
      repo: attempt.repo,
      ...(attempt.installationId === undefined ? {} : { installation_id: attempt.installationId }),
      outcome: attempt.outcome,
      dispatch: attempt.purpose,
      run_id: run.id,
      project_id: run.projectId,
      env_id: run.envId,
      action: run.actionName,
      ...(attempt.attempt === undefined ? {} : { attempt: attempt.attempt }),
      ...(attempt.httpStatus === undefined || attempt.httpStatus === null ? {} : { http_status: attempt.httpStatus }),
      ...(attempt.prNumber === undefined ? {} : { pr_number: attempt.prNumber }),
      ...(attempt.eventType === undefined ? {} : { event_type: attempt.eventType }),
    },
  });
}
