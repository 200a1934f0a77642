import type { Bus } from '../bus/bus.js';
import { Topic } from '../bus/bus.js';

/**
 * Resolves when a `machine:wake` for this machine is published, after `ms`, on shutdown, or when
 * the caller hangs up, whichever is first. Subscribe before reading the database, then wait: a wake-up published
 * between the read and the wait is not missed.
 */
export function machineWaiter(bus: Bus, machineId: string, shutdown: AbortSignal, socket?: { once(ev: 'close', f: () => void): unknown; off(ev: 'close', f: () => void): unknown }) {
  let wake!: () => void;
  const woken = new Promise<void>((r) => (wake = r));
  const unsubscribe = bus.subscribe(Topic.machineWake, (m) => {
    if (m.payload.machineId === machineId) wake();
  });
  const onAbort = () => wake();
  shutdown.addEventListener('abort', onAbort, { once: true });
  // A caller that hung up (an agent that died mid-poll) ends the wait too.
  socket?.once('close', onAbort);
  return {
    async wait(ms: number): Promise<void> {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([woken, new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
      clearTimeout(timer);
    },
    done(): void {
      unsubscribe();
      shutdown.removeEventListener('abort', onAbort);
      socket?.off('close', onAbort);
    },
  };
}
