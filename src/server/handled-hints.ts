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
  private young = new Set<string>();
  private old = new Set<string>();

  constructor(private readonly max = 10_000) {}

  note(id: string): void {
    if (this.young.size >= this.max / 2) {
      this.old = this.young;
      this.young = new Set();
    }
    this.young.add(id);
  }

  /** True, once, for an id noted (within the last `max` or so). */
  take(id: string): boolean {
    return this.young.delete(id) || this.old.delete(id);
  }
}
