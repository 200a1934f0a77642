import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Fault injection for the fault-injection suite, off unless GANTRY_AGENT_FAULT names a fault.
 * `crash-before-report`: the agent SIGKILLs itself after recording an attempt's exit status on
 * disk and before reporting it: the "finished but not reported" case, hit exactly rather than
 * by luck. It fires once per data directory (a marker file), so the restarted agent reports.
 */
export async function crashBeforeReport(dataDir: string): Promise<boolean> {
  if (process.env.GANTRY_AGENT_FAULT !== 'crash-before-report') return false;
  const marker = join(dataDir, 'fault-crash-before-report.done');
  if (existsSync(marker)) return false;
  writeFileSync(marker, new Date().toISOString());
  process.kill(process.pid, 'SIGKILL');
  // Not reached: SIGKILL cannot be caught. Wait so nothing runs on while the signal lands.
  await new Promise(() => {});
  return true;
}
