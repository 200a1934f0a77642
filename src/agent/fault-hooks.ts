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

/**
 * The first report answer that carries an assignment started at placement, once per data
 * directory (docs/failure-detection.md, "Started at placement", hit exactly):
 * `drop-started-answer`: thrown away as if it never arrived (the request timed out after the
 * server had processed it), so the agent never hears of that attempt and sends the report again;
 * `hold-started-answer`: held (a slow network) until the test writes `fault-hold-started-answer.release`
 * in the data directory, having seen `fault-hold-started-answer.held` there: a cancel while it travels.
 */
export async function startedAnswerFault<R extends { assignments?: readonly { started?: boolean }[] }>(dataDir: string, res: R): Promise<R> {
  const fault = process.env.GANTRY_AGENT_FAULT;
  if (fault !== 'drop-started-answer' && fault !== 'hold-started-answer') return res;
  if (!res.assignments?.some((a) => a.started)) return res;
  const marker = join(dataDir, `fault-${fault}.done`);
  if (existsSync(marker)) return res;
  if (fault === 'hold-started-answer') {
    // Says it holds one, and waits for the test to let it go (at most 30 s).
    writeFileSync(join(dataDir, 'fault-hold-started-answer.held'), new Date().toISOString());
    const release = join(dataDir, 'fault-hold-started-answer.release');
    for (const t = Date.now(); !existsSync(release) && Date.now() - t < 30_000;) await new Promise((r) => setTimeout(r, 10));
  }
  writeFileSync(marker, new Date().toISOString());
  if (fault === 'hold-started-answer') return res;
  throw Object.assign(new Error('fault: the report answer was dropped'), { name: 'TimeoutError' });
}
