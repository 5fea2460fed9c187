import type { RegisterCommands } from '../context';
import { CliError, UsageError } from '../errors';
import {
  SETTING_KEYS,
  SETTINGS,
  checkSettingValue,
  describeSource,
  isSettingKey,
  maskSecret,
  writeConfigFile,
  type ResolvedSetting,
  type SettingKey,
} from '../settings';

/**
 * `cellplane config path|get|list|set|unset`. `get` and `list` show the
 * value in effect (flag > environment > file > default) and where it came
 * from; the token is masked (`****` and its last four characters) unless
 * --show-secret is given.
 */
export const registerConfigCommands: RegisterCommands = (program, context) => {
  const config = program.command('config').description(`the settings (${SETTING_KEYS.join(', ')}) and the config file`);

  config
    .command('path')
    .description('print where the config file is')
    .action(() => {
      const { settings, out } = context();
      out.line(settings.configPath);
    });

  config
    .command('get')
    .description('print the value in effect, and (on stderr) where it came from')
    .argument('<key>', SETTING_KEYS.join(' | '))
    .option('--show-secret', 'print the token in full')
    .action((key: string, options: { showSecret?: boolean }) => {
      const settingKey = settingKeyOf(key);
      const { settings, out } = context();
      const setting = settings.values[settingKey];
      const shown = shownValue(settingKey, setting, options.showSecret);
      if (out.jsonMode) return out.json({ key: settingKey, value: shown ?? null, source: setting.source ? describeSource(setting.source) : null });
      if (shown === undefined) {
        throw new CliError(`${settingKey} is not set`, `set it with ${SETTINGS[settingKey].flag}, ${SETTINGS[settingKey].variable} or \`cellplane config set ${settingKey} <value>\``);
      }
      out.line(shown);
      out.info(`from ${describeSource(setting.source)}`);
    });

  config
    .command('list')
    .description('every setting: the value in effect and where it came from')
    .option('--show-secret', 'print the token in full')
    .action((options: { showSecret?: boolean }) => {
      const { settings, out } = context();
      const rows = SETTING_KEYS.map((key) => {
        const setting = settings.values[key];
        return { key, value: shownValue(key, setting, options.showSecret) ?? null, source: setting.source ? describeSource(setting.source) : null };
      });
      if (out.jsonMode) return out.json(rows);
      out.table(rows, [
        { key: 'key', header: 'KEY' },
        { key: 'value', header: 'VALUE' },
        { key: 'source', header: 'FROM', format: (value) => (value === null ? '-' : String(value)) },
      ]);
    });

  config
    .command('set')
    .description('write a value to the config file (created 0600 in a 0700 directory)')
    .argument('<key>', SETTING_KEYS.join(' | '))
    .argument('<value>')
    .action((key: string, value: string) => {
      const settingKey = settingKeyOf(key);
      const checked = checkSettingValue(settingKey, value);
      const { settings, out } = context();
      writeConfigFile(settings.configPath, { [settingKey]: checked });
      out.info(`${settingKey} set in ${settings.configPath}`);
      shadowedNote(settings.values[settingKey], settingKey, (text) => out.warn(text));
    });

  config
    .command('unset')
    .description('remove a value from the config file')
    .argument('<key>', SETTING_KEYS.join(' | '))
    .action((key: string) => {
      const settingKey = settingKeyOf(key);
      const { settings, out } = context();
      writeConfigFile(settings.configPath, { [settingKey]: undefined });
      out.info(`${settingKey} removed from ${settings.configPath}`);
    });
};

function settingKeyOf(key: string): SettingKey {
  if (isSettingKey(key)) return key;
  const near = SETTING_KEYS.find((candidate) => candidate.toLowerCase() === key.toLowerCase() || candidate.toLowerCase() === `current${key.toLowerCase()}`);
  throw new UsageError(`unknown setting "${key}"${near ? `; did you mean ${near}?` : ''} The keys are ${SETTING_KEYS.join(', ')}`);
}

function shownValue(key: SettingKey, setting: ResolvedSetting, showSecret: boolean | undefined): string | undefined {
  if (setting.value === undefined) return undefined;
  return SETTINGS[key].secret && !showSecret ? maskSecret(setting.value) : setting.value;
}

/** After `config set`, a flag or variable of this very run still wins: say so, or the user wonders why nothing changed. */
function shadowedNote(setting: ResolvedSetting, key: SettingKey, warn: (text: string) => void): void {
  if (setting.source?.kind === 'env' || setting.source?.kind === 'flag') {
    warn(`${describeSource(setting.source)} is set and takes precedence over the file's ${key}`);
  }
}
