import type { Bus } from '../bus/bus.js';
import { Topic } from '../domain/topic.js';

type HangUp = { once(ev: 'close', f: () => void): unknown; off(ev: 'close', f: () => void): unknown };

interface Held {
  wake(): void;
  end(): void;
}

/**
 * Every held heartbeat of this server, by machine: one `machine:wake` subscription and one
 * listener on the shutdown signal for all of them. A wake-up costs a map lookup and the calls of
 * that machine's waits (one, but for an agent whose retried poll overlaps its last), not a call to
 * every held heartbeat: with 10,000 agents held, 50 placements a second were 500,000 handler calls
 * a second (docs/throughput.md, "A fleet of agents").
 */
export class MachineWakes {
  private readonly held = new Map<string, Set<Held>>();
  private ended: boolean;

  constructor(bus: Bus, shutdown: AbortSignal) {
    bus.subscribe(Topic.machineWake, (m) => {
      const waits = this.held.get(m.payload.machineId);
      if (waits) for (const w of waits) w.wake();
    });
    this.ended = shutdown.aborted;
    shutdown.addEventListener(
      'abort',
      () => {
        this.ended = true;
        for (const waits of this.held.values()) for (const w of waits) w.end();
      },
      { once: true },
    );
  }

  /** How many waits are held now (all machines). */
  get size(): number {
    let n = 0;
    for (const waits of this.held.values()) n += waits.size;
    return n;
  }

  /**
   * Resolves when a `machine:wake` for this machine is published, after `ms`, on shutdown, or when
   * the caller hangs up, whichever is first. Subscribe before reading the database, then wait: a
   * wake-up published between the read and the wait is not missed. Each wait is for a wake-up after
   * the previous wait ended (or the one that came between): a held heartbeat woken for something it
   * does not answer (report-memory.ts) waits again rather than spin. Shutdown and hang-up end every
   * wait from then on; `done()` must be called once the caller is finished.
   */
  waiter(machineId: string, socket?: HangUp) {
    /** A wake-up came while nobody waited: the next wait returns at once. */
    let pending = false;
    let ended = this.ended;
    let resolveWait: (() => void) | null = null;
    const wake = () => {
      if (resolveWait) {
        resolveWait();
        resolveWait = null;
      } else pending = true;
    };
    const end = () => {
      ended = true;
      wake();
    };
    const me: Held = { wake, end };
    let waits = this.held.get(machineId);
    if (!waits) this.held.set(machineId, (waits = new Set()));
    waits.add(me);
    // A caller that hung up (an agent that died mid-poll) ends the wait too.
    socket?.once('close', end);
    return {
      /** True when woken (a wake-up, shutdown or hang-up), false when `ms` passed without one. */
      async wait(ms: number): Promise<boolean> {
        if (pending || ended) {
          pending = false;
          return true;
        }
        let timer: NodeJS.Timeout | undefined;
        const woken = await Promise.race([
          new Promise<boolean>((r) => (resolveWait = () => r(true))),
          new Promise<boolean>((r) => (timer = setTimeout(() => r(false), ms))),
        ]);
        resolveWait = null;
        clearTimeout(timer);
        return woken;
      },
      done: (): void => {
        waits.delete(me);
        if (waits.size === 0 && this.held.get(machineId) === waits) this.held.delete(machineId);
        socket?.off('close', end);
      },
    };
  }
}
