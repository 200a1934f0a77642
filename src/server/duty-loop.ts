import type { ReconcilerDuty } from '../reconciler/reconciler-duty.js';
import { Loop } from './loop.js';

/**
 * A duty run by its own loop on its own interval: what it did goes to `report`; what it threw
 * goes to `onError` with the duty's name, and its next pass comes on time, as do the other
 * duties' (each has its loop), or sooner where the duty asks (`nextWithinMs`). `ready` false
 * skips a pass (the restart grace).
 */
export function dutyLoop<R>(
  duty: ReconcilerDuty<R>,
  report: (r: R) => void,
  p: { onError: (loop: string) => (err: unknown) => void; random: () => number; ready?: () => boolean },
): Loop {
  return new Loop(
    duty.name,
    async () => {
      if (p.ready && !p.ready()) return;
      const r = await duty.runOnce();
      report(r);
      return duty.nextWithinMs?.(r);
    },
    duty.intervalMs,
    p.onError(duty.name),
    p.random,
  );
}
