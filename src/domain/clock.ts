/**
 * Time, injected. Nothing in domain/, scheduler/ or advancer/ reads the wall clock; the server
 * passes a Clock to the parts that need "now" (pure functions and store verbs take `now` itself),
 * and tests pass the times they want.
 */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };
