import { createLogUpdate } from 'log-update';
import type { MachineView } from '../../api/contract/job-view.js';
import { ConnectionError } from '../client/connection-error.js';
import type { GantryClient } from '../client/gantry-client.js';
import { pollDelay } from '../client/poll-delay.js';
import type { CliIo } from './cli-io.js';
import { formatDuration } from './format-duration.js';

export interface WaitDrainedResult {
  /** The last view seen: `drained`, unless the wait was interrupted or the machine stopped draining. */
  machine: MachineView;
  interrupted: boolean;
}

/** "1 attempt", "3 attempts". */
export function attemptCount(n: number): string {
  return n === 1 ? '1 attempt' : `${n} attempts`;
}

/**
 * Polls a draining machine until it is drained, stops draining (someone uncordoned it), or
 * `io.signal` aborts. On a TTY one progress line is redrawn ("draining gpu-1: 2 attempts left,
 * 00:12"); elsewhere a line is printed each time the count or the machine's health changes.
 * `quiet` prints nothing.
 */
export async function waitDrained(
  client: Pick<GantryClient, 'machine'>,
  first: MachineView,
  opts: { io: CliIo; interval?: number; quiet?: boolean; reconnectGraceMs?: number },
): Promise<WaitDrainedResult> {
  const { io } = opts;
  const now = io.now ?? Date.now;
  const started = now();
  const tty = !opts.quiet && io.stdout.isTTY === true;
  const log = tty ? createLogUpdate(io.stdout as NodeJS.WritableStream) : null;
  let shown = '';
  const show = (m: MachineView) => {
    // A lost machine's attempts hold their resources until its agent is back: say why it waits.
    const text = `draining ${m.name}: ${attemptCount(m.allocated.attempts)} left, ${formatDuration(now() - started)}${m.health === 'ready' ? '' : ` (machine ${m.health})`}`;
    const key = `${m.allocated.attempts} ${m.health}`;
    if (log) log(text);
    else if (!opts.quiet && key !== shown) io.stdout.write(`${text}\n`);
    shown = key;
  };

  let machine = first;
  let lastContact = now();
  try {
    for (;;) {
      if (machine.scheduling !== 'draining') return { machine, interrupted: false };
      show(machine);
      if (!(await pollDelay(opts.interval ?? 1000, io.signal))) return { machine, interrupted: true };
      try {
        machine = await client.machine(machine.id);
        lastContact = now();
      } catch (e) {
        // A server restart is no reason to stop waiting; a machine removed meanwhile (404) is.
        if (!(e instanceof ConnectionError) || now() - lastContact > (opts.reconnectGraceMs ?? 60_000)) throw e;
      }
    }
  } finally {
    log?.clear();
    log?.done();
  }
}
