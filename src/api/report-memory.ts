/**
 * What the reports of each machine carried lately, in this process, for the heartbeats held
 * meanwhile (docs/agent.md, "Assignments on the answers to reports"): the assignments their
 * answers carried, and the attempts whose outcomes they reported. A held heartbeat is answered for
 * neither: the agent has the first from the report's answer, and knows the second ended (it said
 * so). Under load nearly every report has outcomes and its transaction places work where they
 * freed room; without this memory each of them woke the machine's held heartbeat into an answer of
 * nothing new (a kill order for attempts just ended, the assignments just sent): a request and a
 * wake-up of the agent for nothing, one for every report.
 *
 * Assignments are left out of a heartbeat only when offered after it arrived: the agent listed what
 * it had when it sent it, and an answer to a report it may not have received (a lost response) is
 * not taken for delivered by a later heartbeat. An outcome is reported only once its process has
 * ended, so a kill order for it is moot whenever it comes. A duplicate is harmless (the agent runs
 * an attempt id once, and ignores a kill of what it does not run); a missing assignment would wait
 * for the next heartbeat. In memory only: another replica's heartbeat does not know, and answers.
 */
export class ReportMemory {
  private seq = 0;
  private readonly byMachine = new Map<string, MachineMemory>();

  /** @param keepMs how long anything is remembered: longer than any heartbeat is held. */
  constructor(private readonly keepMs: number) {}

  /** A mark to compare offers with: taken when a heartbeat arrives. */
  mark(): number {
    return this.seq;
  }

  /** A report's answer carried these assignments to the machine's agent. */
  offered(machineId: string, attemptIds: readonly string[], now: number): void {
    const m = this.machine(machineId, now);
    const seq = ++this.seq;
    for (const id of attemptIds) put(m.offers, id, { seq, at: now });
  }

  /** A report told these attempts' outcomes: their processes have ended. */
  ended(machineId: string, attemptIds: readonly string[], now: number): void {
    const m = this.machine(machineId, now);
    for (const id of attemptIds) put(m.ended, id, { at: now });
  }

  /** The machine's assignments offered on reports' answers after `mark` (and not forgotten since). */
  offeredSince(machineId: string, mark: number): string[] {
    const offers = this.byMachine.get(machineId)?.offers;
    if (!offers) return [];
    const out: string[] = [];
    for (const [id, o] of offers) if (o.seq > mark) out.push(id);
    return out;
  }

  /** Whether the machine's reports told this attempt's outcome (lately). */
  hasEnded(machineId: string, attemptId: string): boolean {
    return this.byMachine.get(machineId)?.ended.has(attemptId) ?? false;
  }

  /** The machine's memory, with what is older than keepMs forgotten. */
  private machine(machineId: string, now: number): MachineMemory {
    let m = this.byMachine.get(machineId);
    if (!m) this.byMachine.set(machineId, (m = { offers: new Map(), ended: new Map() }));
    forget(m.offers, now - this.keepMs);
    forget(m.ended, now - this.keepMs);
    return m;
  }
}

interface MachineMemory {
  /** Attempt id → the offer's sequence number and time, oldest first. */
  offers: Map<string, { seq: number; at: number }>;
  /** Attempt id → when its outcome was reported, oldest first. */
  ended: Map<string, { at: number }>;
}

/** Set anew, so that the map stays in the order of time (a repeat moves to the end). */
function put<E extends { at: number }>(map: Map<string, E>, id: string, e: E): void {
  map.delete(id);
  map.set(id, e);
}

/** Drops entries from before `before`: oldest first, so it stops at the first one kept. */
function forget(map: Map<string, { at: number }>, before: number): void {
  for (const [id, e] of map) {
    if (e.at >= before) return;
    map.delete(id);
  }
}
