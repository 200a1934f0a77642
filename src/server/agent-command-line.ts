import { fileURLToPath } from 'node:url';
import { agentArgs, type ClusterMachine } from './cluster-file.js';

// The CLI entry beside this file, compiled (.js) or run from source under tsx (.ts).
const MAIN = fileURLToPath(new URL(`../cli/main${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url));

/**
 * How this host runs a local `gantry agent` standing in for a machine: `gantry up`'s agents and
 * the local autoscaling provider's (src/autoscale/local-provider.ts) alike. This same Node with
 * this process's Node flags runs this same CLI entry, so the children run the way it does (a
 * loader under tsx, the same heap limits).
 */
export function agentCommandLine(m: ClusterMachine, serverUrl: string, dataDir: string): { command: string; args: string[] } {
  return { command: process.execPath, args: [...process.execArgv, MAIN, ...agentArgs(m, serverUrl, dataDir)] };
}
