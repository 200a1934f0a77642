import type { Bus } from '../bus/bus.js';
import { Topic } from '../bus/bus.js';

/**
 * Resolves when a `machine:wake` for this machine is published, after `ms`, or on shutdown,
 * whichever is first. Subscribe before reading the database, then wait: a wake-up published
 * between the read and the wait is not missed.
 */
export function machineWaiter(bus: Bus, machineId: string, shutdown: AbortSignal) {
  let wake!: () => void;
  const woken = new Promise<void>((r) => (wake = r));
  const unsubscribe = bus.subscribe(Topic.machineWake, (m) => {
    if (m.payload.machineId === machineId) wake();
  });
  const onAbort = () => wake();
  shutdown.addEventListener('abort', onAbort, { once: true });
  return {
    async wait(ms: number): Promise<void> {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([woken, new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
      clearTimeout(timer);
    },
    done(): void {
      unsubscribe();
      shutdown.removeEventListener('abort', onAbort);
    },
  };
}
