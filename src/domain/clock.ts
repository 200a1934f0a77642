/**
 * Time, injected. Nothing in domain/, scheduler/ or advancer/ reads the wall clock; the server
 * passes a Clock to the parts that need "now", and tests pass a ManualClock they move by hand.
 */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

export class ManualClock implements Clock {
  constructor(private t: number = 1_700_000_000_000) {}
  now(): number {
    return this.t;
  }
  advance(ms: number): void {
    this.t += ms;
  }
  set(t: number): void {
    this.t = t;
  }
}
