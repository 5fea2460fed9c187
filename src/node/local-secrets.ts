import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Local-only ENCRYPTION_KEY and AUTH_SECRET for the embedded database,
 * generated once into the data folder (mode 0600) so restarts can decrypt
 * what earlier runs stored. Never used when DATABASE_URL is set: a real
 * deployment sets its own.
 */
export interface LocalSecrets {
  ENCRYPTION_KEY: string;
  AUTH_SECRET: string;
}

export function loadOrCreateLocalSecrets(dataDir: string): LocalSecrets {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const file = join(dataDir, 'secrets.json');
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as LocalSecrets;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  const secrets: LocalSecrets = {
    ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    AUTH_SECRET: randomBytes(48).toString('base64url'),
  };
  try {
    // 'wx': if another process created it meanwhile, use theirs
    writeFileSync(file, `${JSON.stringify(secrets, null, 2)}\n`, { mode: 0o600, flag: 'wx' });
    chmodSync(file, 0o600);
    return secrets;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    return JSON.parse(readFileSync(file, 'utf8')) as LocalSecrets;
  }
}
