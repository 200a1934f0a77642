import type { Colors } from './palette.js';

/** Machine health colours: a machine's `ready` is good news, unlike a stage's. */
export function colorHealth(health: string, c: Colors): string {
  switch (health) {
    case 'ready':
      return c.green(health);
    case 'lost':
      return c.red(health);
    case 'suspect':
      return c.yellow(health);
    default:
      return health;
  }
}
