import type { Bus } from '../bus/bus.js';
import { Topic } from '../domain/topic.js';

type HangUp = { on(ev: 'close', f: () => void): unknown; off(ev: 'close', f: () => void): unknown };

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
  waiter(machineId: string, socket?: HangUp): HeldWait {
    let waits = this.held.get(machineId);
    if (!waits) this.held.set(machineId, (waits = new Set()));
    const me = new HeldWait(this, machineId, this.ended, socket);
    waits.add(me);
    return me;
  }

  /** A wait's `done()`: it is no longer woken. */
  forget(machineId: string, me: Held): void {
    const waits = this.held.get(machineId);
    if (!waits) return;
    waits.delete(me);
    if (waits.size === 0) this.held.delete(machineId);
  }
}

/**
 * One held heartbeat's wait (`MachineWakes.waiter`). A class rather than closures: a held
 * heartbeat lives a whole period, so whatever it allocates survives the young generation and is
 * copied into the old one (docs/throughput.md, "Where a held heartbeat's allocations went"); one
 * object, one closure for the socket's `close` and one promise a wait, where closures over a
 * context were five functions, two objects, `once`'s wrapper and a race of two promises (three).
 */
class HeldWait implements Held {
  /** A wake-up came while nobody waited: the next wait returns at once. */
  private pending = false;
  private resolveWait: ((woken: boolean) => void) | null = null;
  private timer: NodeJS.Timeout | undefined;
  /** Given to the socket's `close`: a caller that hung up (an agent that died mid-poll) ends the wait too. */
  private readonly hungUp: (() => void) | undefined;

  constructor(
    private readonly wakes: MachineWakes,
    private readonly machineId: string,
    private ended: boolean,
    private readonly socket?: HangUp,
  ) {
    if (socket) {
      this.hungUp = () => this.end();
      // `on`, not `once`: `done()` removes it, and `once` wraps it in a bound function and a state object.
      socket.on('close', this.hungUp);
    }
  }

  wake(): void {
    const resolve = this.resolveWait;
    if (!resolve) {
      this.pending = true;
      return;
    }
    this.resolveWait = null;
    clearTimeout(this.timer);
    resolve(true);
  }

  end(): void {
    this.ended = true;
    this.wake();
  }

  /** True when woken (a wake-up, shutdown or hang-up), false when `ms` passed without one. */
  wait(ms: number): Promise<boolean> {
    if (this.pending || this.ended) {
      this.pending = false;
      return Promise.resolve(true);
    }
    return new Promise<boolean>((resolve) => {
      this.resolveWait = resolve;
      this.timer = setTimeout(() => {
        this.resolveWait = null;
        resolve(false);
      }, ms);
    });
  }

  /** Called once the caller is finished with the wait. */
  done(): void {
    this.wakes.forget(this.machineId, this);
    if (this.hungUp) this.socket?.off('close', this.hungUp);
  }
}
