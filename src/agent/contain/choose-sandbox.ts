/**
 * What `--sandbox` comes to on this host, decided once at the agent's start (docs/containment.md,
 * "The sandbox"): bubblewrap when it works; when it does not, under `--containment auto` the agent
 * says so and runs its stages without it, under `require` it refuses to start.
 */
import type { ContainmentReport } from '../../api/contract/containment.js';
import { ContainmentOptionError, type ContainmentOptions } from './containment-options.js';
import type { FoundSandbox } from './find-sandbox.js';
import type { SandboxTool } from './sandbox-argv.js';

/** `--sandbox` under `--containment require` on a host where bubblewrap does not work: the agent does not start. */
export class SandboxUnavailableError extends Error {}

export interface SandboxChoice {
  /** What every attempt's command is wrapped in (sandboxArgv); null: no sandbox. */
  readonly tool: SandboxTool | null;
  /** ContainmentReport.sandbox. */
  readonly report: ContainmentReport['sandbox'];
  /** For ContainmentReport.problems and the agent's first lines: why there is no sandbox though one was asked for. */
  readonly problems: readonly string[];
}

/** ContainmentReport.problems' limit per problem. */
const MAX_PROBLEM = 500;

/** `find` is findSandbox with the attempts' user, called only when `--sandbox` is on. */
export function chooseSandbox(opts: Pick<ContainmentOptions, 'sandbox' | 'mode'>, find: () => FoundSandbox): SandboxChoice {
  if (!opts.sandbox) return { tool: null, report: null, problems: [] };
  switch (opts.mode) {
    case 'off':
      // Off runs stages as the agent's own user, root included, and bwrap run as root leaves the
      // command root's files: a sandbox there would promise what it does not keep.
      throw new ContainmentOptionError('--sandbox with --containment off: the sandbox is part of containment; use --containment auto or require');
    case 'auto':
    case 'require':
      break;
  }
  const found = find();
  if (!('problem' in found)) return { tool: found, report: 'bwrap', problems: [] };
  if (opts.mode === 'require') throw new SandboxUnavailableError(`--sandbox with --containment require, and no sandbox here: ${found.problem}`);
  const problem = `no sandbox, stages run without it: ${found.problem}`;
  return { tool: null, report: null, problems: [problem.length > MAX_PROBLEM ? `${problem.slice(0, MAX_PROBLEM - 1)}…` : problem] };
}
