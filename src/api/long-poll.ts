import { setMaxListeners } from 'node:events';
import type { Bus } from '../bus/bus.js';
import { Topic } from '../domain/topic.js';

/**
 * Resolves when a `machine:wake` for this machine is published, after `ms`, on shutdown, or when
 * the caller hangs up, whichever is first. Subscribe before reading the database, then wait: a
 * wake-up published between the read and the wait is not missed. Each wait is for a wake-up after
 * the previous wait ended (or the one that came between): a held heartbeat woken for something it
 * does not answer (report-memory.ts) waits again rather than spin. Shutdown and hang-up end every
 * wait from then on.
 */
export function machineWaiter(
  bus: Bus,
  machineId: string,
  shutdown: AbortSignal,
  socket?: { once(ev: 'close', f: () => void): unknown; off(ev: 'close', f: () => void): unknown },
) {
  /** A wake-up came while nobody waited: the next wait returns at once. */
  let pending = false;
  let ended = false;
  let resolveWait: (() => void) | null = null;
  const wake = () => {
    if (resolveWait) {
      resolveWait();
      resolveWait = null;
    } else pending = true;
  };
  const unsubscribe = bus.subscribe(Topic.machineWake, (m) => {
    if (m.payload.machineId === machineId) wake();
  });
  const onAbort = () => {
    ended = true;
    wake();
  };
  // Every held heartbeat listens to the one shutdown signal: thousands at once with a fleet of
  // agents, each removed when its wait is done. Node warns past 10 listeners on an EventTarget
  // (MaxListenersExceededWarning, seen with bench:fleet); here that many is the design, not a leak.
  setMaxListeners(0, shutdown);
  shutdown.addEventListener('abort', onAbort, { once: true });
  // A caller that hung up (an agent that died mid-poll) ends the wait too.
  socket?.once('close', onAbort);
  return {
    async wait(ms: number): Promise<void> {
      if (pending || ended) {
        pending = false;
        return;
      }
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([new Promise<void>((r) => (resolveWait = r)), new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
      resolveWait = null;
      clearTimeout(timer);
    },
    done(): void {
      unsubscribe();
      shutdown.removeEventListener('abort', onAbort);
      socket?.off('close', onAbort);
    },
  };
}
