import type { Clock } from '../platform';

/** An installation access token (GitHub: `ghs_…`, valid one hour). Never logged, never returned by the API. */
export interface InstallationToken {
  token: string;
  expiresAt: Date;
}

/** A cached token is used until this long before GitHub's `expires_at`, so a request made with it cannot outlive it. */
export const TOKEN_REFRESH_MARGIN_MS = 5 * 60 * 1000;

/**
 * Installation tokens, per installation, for as long as this process (Node)
 * or isolate (Worker) lives. A token is served until TOKEN_REFRESH_MARGIN_MS
 * before it expires; concurrent callers of one installation share one mint;
 * `clear` (installation deleted, suspended or unsuspended) drops the token,
 * and a mint already under way when it is cleared is not kept: it may have
 * been made before the change.
 *
 * Another isolate or process keeps its own tokens until they expire: GitHub
 * revokes an installation's tokens when it is suspended or deleted, and an
 * installation is used only while its row is `active` (docs/codehost.md,
 * The App client).
 */
export class InstallationTokenCache {
  readonly #entries = new Map<number, InstallationToken>();
  readonly #pending = new Map<number, Promise<InstallationToken>>();
  /** Bumped by `clear`: a mint started under an older generation is returned to its callers but not cached. */
  readonly #generations = new Map<number, number>();

  constructor(
    private readonly clock: Clock,
    private readonly marginMs = TOKEN_REFRESH_MARGIN_MS,
  ) {}

  /** The cached token of `installationId` while it is fresh enough, else undefined. */
  peek(installationId: number): InstallationToken | undefined {
    const entry = this.#entries.get(installationId);
    if (!entry) return undefined;
    if (entry.expiresAt.getTime() - this.marginMs > this.clock.now().getTime()) return entry;
    this.#entries.delete(installationId);
    return undefined;
  }

  /** The cached token, or the one `mint` makes (shared by every caller waiting on the same installation). */
  async get(installationId: number, mint: () => Promise<InstallationToken>): Promise<InstallationToken> {
    const cached = this.peek(installationId);
    if (cached) return cached;
    const pending = this.#pending.get(installationId);
    if (pending) return pending;
    const generation = this.#generations.get(installationId) ?? 0;
    const minting = mint()
      .then((token) => {
        if ((this.#generations.get(installationId) ?? 0) === generation) this.#entries.set(installationId, token);
        return token;
      })
      .finally(() => {
        if (this.#pending.get(installationId) === minting) this.#pending.delete(installationId);
      });
    this.#pending.set(installationId, minting);
    return minting;
  }

  clear(installationId: number): void {
    this.#entries.delete(installationId);
    this.#pending.delete(installationId);
    this.#generations.set(installationId, (this.#generations.get(installationId) ?? 0) + 1);
  }
}
