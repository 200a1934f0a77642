import type { Command } from '@commander-js/extra-typings';
import { databaseLabel, defaultServerConfig } from './server-config.js';
import { databaseUrlFrom } from './server-command.js';
import { PRIVATE_UMASK } from '../lib/private-mode.js';

/**
 * `gantry migrate`: brings the database to this version's schema and exits. A server does the same
 * at start; this is for upgrading ahead of rolling replicas, or checking a database is reachable.
 * Several at once are safe: the migrator holds a lock while it runs.
 */
export function migrateCommand(program: Command): void {
  program
    .command('migrate')
    .description('Bring the database to this version of Gantry (servers do this at start too)')
    .option('--data-dir <dir>', 'where the SQLite database lives (without --database)', './.gantry')
    .option('--database <url>', 'postgres://… to migrate instead; default $GANTRY_DATABASE_URL')
    .option('--json', 'print what was done as one JSON object')
    .addHelpText(
      'after',
      '\nExit codes: 0 done (or already current), 1 the database could not be reached or migrated.\n\nExample:\n  gantry migrate --database postgres://gantry@db.internal:5432/gantry\n',
    )
    .action(async (flags) => {
      // A database it creates (SQLite, a fresh data directory) is its user's only, as the server's.
      process.umask(PRIVATE_UMASK);
      const config = defaultServerConfig({ dataDir: flags.dataDir, databaseUrl: databaseUrlFrom(flags.database) });
      const { openStore } = await import('./open-store.js');
      const store = await openStore(config, { migrate: false });
      const where = databaseLabel(config);
      try {
        const applied = await store.migrate().catch((err: Error) => {
          throw new Error(`${where}: ${err.message}`);
        });
        if (flags.json) process.stdout.write(JSON.stringify({ database: where, applied }) + '\n');
        else process.stdout.write(applied.length ? `${where}: applied ${applied.join(', ')}\n` : `${where}: already current\n`);
      } finally {
        await store.close();
      }
    });
}
