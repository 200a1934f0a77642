import type { Trx } from './tx-context.js';

/**
 * The machines whose reports, in one transaction, asked that the work the transaction places on
 * them be written `running` at once, and what it started there (docs/throughput.md, "Started at
 * placement"). The report asks (report-verbs.ts); the placement pass before the commit, which
 * knows nothing of the reports it follows, reads the machines here and records what it started;
 * the report's answer carries those. Kept per transaction, by its connection object (every part
 * of one transaction runs on the same one: a group's members, a report's items, the pass), so
 * that a transaction run again starts from nothing, and one that placed nothing answers nothing.
 */
export class StartOnPlacement {
  private readonly byMachine = new Map<string, string[]>();

  /** The machine's placements in this transaction are to start at once. */
  ask(machineId: string): void {
    if (!this.byMachine.has(machineId)) this.byMachine.set(machineId, []);
  }

  /** The machines that asked: planApply's `startOn`. */
  machines(): ReadonlySet<string> {
    return new Set(this.byMachine.keys());
  }

  /** An attempt the pass wrote `running` on a machine that asked. */
  started(machineId: string, attemptId: string): void {
    this.byMachine.get(machineId)?.push(attemptId);
  }

  /** The pass was undone (its savepoint rolled back): nothing it recorded was committed. */
  undo(): void {
    for (const ids of this.byMachine.values()) ids.length = 0;
  }

  /** What this transaction started on the machine. */
  startedOn(machineId: string): string[] {
    return [...(this.byMachine.get(machineId) ?? [])];
  }
}

const byTransaction = new WeakMap<Trx, StartOnPlacement>();

/** The transaction's record, made on first use (by a report that asks). */
export function startOnPlacement(trx: Trx): StartOnPlacement {
  let s = byTransaction.get(trx);
  if (!s) byTransaction.set(trx, (s = new StartOnPlacement()));
  return s;
}

/** The transaction's record, if a report in it asked. */
export function startOnPlacementAsked(trx: Trx): StartOnPlacement | undefined {
  return byTransaction.get(trx);
}
