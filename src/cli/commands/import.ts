import { InvalidArgumentError } from 'commander';
import type { RegisterCommands } from '../context';

/**
 * `cellplane import terraform`: the flags. The import itself
 * (src/cli/terraform/command.ts) loads only when it runs: it validates
 * properties with the server's own rules, which no other command needs at
 * start-up.
 */

const count = (value: string): number => {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError('give a whole number, 0 or more.');
  return Number(value);
};

export const registerImportCommands: RegisterCommands = (program, context) => {
  const importCommand = program.command('import').description('import resources from other tools into the catalog');
  importCommand
    .command('terraform')
    // the default project is DEFAULT_IMPORT_PROJECT of src/cli/terraform/command.ts
    .description('import a Terraform state (format 4) as entities of the project (default "terrantula")')
    .option('--state <file>', 'a state file (terraform.tfstate, or `terraform state pull` output)')
    .option('--workspace <org/name>', 'the current state of a Terraform Cloud / Enterprise workspace')
    .option('--hostname <host[:port]>', 'Terraform Enterprise host (TF_CLOUD_HOSTNAME; default app.terraform.io; needs SERVICE_TFC_ALLOW_CUSTOM_HOST=1)')
    .option('--dry-run', 'print what would change, change nothing')
    .option('--max-delete <n>', 'delete at most n entities gone from the state (default 10 % of those the import owns)', count)
    .option('--force', 'no deletion limit')
    .action(async (flags) => {
      const { runImportTerraform } = await import('../terraform/command');
      await runImportTerraform(context(), flags);
    });
};
