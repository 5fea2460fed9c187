import { sso } from '@better-auth/sso';
import { betterAuth } from 'better-auth';
import { drizzleAdapter } from 'better-auth/adapters/drizzle';
import { bearer } from 'better-auth/plugins/bearer';
import type { Config } from '../config';
import type { Db } from '../db/client';
import { authSchema } from '../db/schema';
import type { Logger } from '../logger';
import type { Mailer } from '../platform';
import { invitationMessage, passwordResetMessage, verificationMessage } from './mail-templates';

/** Where Better Auth is mounted (SPEC: the auth handler; DECISIONS §5). */
export const AUTH_BASE_PATH = '/api/auth';

/** The cookie names start with this: `cellplane.session_token`. */
export const AUTH_COOKIE_PREFIX = 'cellplane';

/** A password-reset link that is an invitation carries this query parameter (members/service.ts). */
export const INVITATION_MARKER = 'invitation';

export interface AuthDependencies {
  db: Db;
  config: Config;
  logger: Logger;
  mailer: Mailer;
}

/** The public base URL links in mail are built from: AUTH_URL, else the API's own (DECISIONS §8). */
export const authBaseUrl = (config: Config): string | undefined => config.authUrl ?? config.apiBaseUrl;

/**
 * Better Auth on the request's database: email and password, cookie
 * sessions signed with AUTH_SECRET, the same session as a Bearer value
 * (bearer plugin: `set-auth-token` on sign-in), verification and reset mail
 * through the Mailer port, and OIDC providers per organization in `cloud`
 * mode (the SSO plugin). Cheap to build (no I/O): a host builds one per
 * database handle (the Worker: per request, with its per-request pool).
 */
export function createAuth({ db, config, logger, mailer }: AuthDependencies) {
  const baseURL = authBaseUrl(config);
  const send = (message: Parameters<Mailer['send']>[0]) =>
    mailer.send(message).catch((error: unknown) => {
      // the request that asked for the mail still succeeds; the user can ask again
      logger.error('could not send mail', { to: message.to, subject: message.subject, error });
    });
  return betterAuth({
    appName: 'Cellplane',
    baseURL,
    basePath: AUTH_BASE_PATH,
    secret: config.authSecret.reveal(),
    trustedOrigins: config.trustedOrigins,
    database: drizzleAdapter(db, { provider: 'pg', schema: authSchema }),
    emailAndPassword: {
      enabled: true,
      minPasswordLength: 10,
      // a provisioned member's invitation is a reset link: following it sets the first password
      sendResetPassword: async ({ user, url }) => {
        const invited = new URL(url).searchParams.get('callbackURL')?.includes(`${INVITATION_MARKER}=`) ?? false;
        await send(invited ? invitationMessage(user.email, url) : passwordResetMessage(user.email, url));
      },
    },
    emailVerification: {
      sendOnSignUp: true,
      autoSignInAfterVerification: true,
      sendVerificationEmail: async ({ user, url }) => {
        await send(verificationMessage(user.email, url));
      },
    },
    session: {
      additionalFields: {
        ssoProviderId: { type: 'string', required: false, input: false },
      },
    },
    databaseHooks: {
      session: {
        create: {
          // which provider a session came through decides forceSso (src/auth/memberships.ts)
          before: async (session, context) => {
            const path = context?.path ?? '';
            const providerId = path.startsWith('/sso/callback') ? (context?.params as { providerId?: string } | undefined)?.providerId : undefined;
            return { data: { ...session, ssoProviderId: providerId ?? null } };
          },
        },
      },
    },
    advanced: {
      cookiePrefix: AUTH_COOKIE_PREFIX,
      database: { generateId: 'uuid' },
    },
    // the API's own limiter (src/http/rate-limit.ts) counts /api/auth requests like every other
    rateLimit: { enabled: false },
    telemetry: { enabled: false },
    logger: {
      level: 'error',
      log: (level, message) => {
        if (level === 'error') logger.error('auth handler', { message });
        else logger.warn('auth handler', { message });
      },
    },
    plugins: [bearer(), ...(config.deployment === 'cloud' ? [sso()] : [])],
  });
}

export type Auth = ReturnType<typeof createAuth>;

const authByDatabase = new WeakMap<Db, Auth>();

/**
 * Better Auth for a database handle, built once per handle: once for the
 * Node host's long-lived pool, once per request on the Worker (whose pool is
 * the request's). Building costs about a millisecond and no I/O.
 */
export function authFor(dependencies: AuthDependencies): Auth {
  let auth = authByDatabase.get(dependencies.db);
  if (!auth) authByDatabase.set(dependencies.db, (auth = createAuth(dependencies)));
  return auth;
}
