import { CommandProvider } from '../autoscale/command-provider.js';
import { LocalProvider } from '../autoscale/local-provider.js';
import { ScaleProvider, type PoolTemplate } from '../autoscale/pool-template.js';
import type { MachineProvider } from '../autoscale/provider.js';
import { agentCommandLine } from './agent-command-line.js';

/**
 * The provider of each autoscaled pool (docs/autoscaling.md, "Providers"): one local provider for
 * every `local` pool (its agents are this process's children, one table of them), one command
 * provider per `command` pool (each its own executable). Their lines go to the server's log.
 */
export function poolProviders(
  config: { pools: readonly PoolTemplate[]; dataDir: string },
  log: { info(obj: object, msg: string): void },
): Map<string, MachineProvider> {
  let local: LocalProvider | null = null;
  const out = new Map<string, MachineProvider>();
  for (const pool of config.pools) {
    switch (pool.autoscale.provider) {
      case ScaleProvider.local:
        local ??= new LocalProvider({ agentCommandLine, dataDir: config.dataDir, log: (line) => log.info({ provider: 'local' }, line) });
        out.set(pool.name, local);
        break;
      case ScaleProvider.command:
        // parsePools requires the command; the cluster file made a relative one absolute (beside the file).
        out.set(
          pool.name,
          new CommandProvider({
            command: pool.autoscale.command!,
            baseDir: process.cwd(),
            log: (line) => log.info({ provider: 'command', pool: pool.name }, line),
          }),
        );
        break;
    }
  }
  return out;
}
