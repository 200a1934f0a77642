/**
 * The bus ids of this process's own placement hints that a pass before their commit handled
 * (OutboxMessage.handled), noted by the relay before the bus has them: their delivery to this
 * replica's scheduler loop wakes nothing (docs/scheduling.md, "Which hints wake the loop"). Each
 * is taken once, at its delivery; any other id (another replica's message, a hint no pass
 * handled, a row the relay sends again after a crash) is not here and wakes the loop. Two
 * generations, as RecentIds: a note whose delivery never came (a bus that dropped it) is forgotten
 * after `max` or so newer ones, rather than kept for the life of the process.
 */
export class HandledHints {
  private young = new Map<string, number>();
  private old = new Map<string, number>();

  constructor(private readonly max = 10_000) {}

  note(id: string, since: number): void {
    if (this.young.size >= this.max / 2) {
      this.old = this.young;
      this.young = new Map();
    }
    this.young.set(id, since);
  }

  /** When the handling transaction began, once, for an id noted (within the last `max` or so); else undefined. */
  take(id: string): number | undefined {
    for (const gen of [this.young, this.old]) {
      const since = gen.get(id);
      if (since !== undefined) {
        gen.delete(id);
        return since;
      }
    }
    return undefined;
  }
}
