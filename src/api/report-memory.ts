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
 *
 * Assignments started at placement (docs/failure-detection.md, "Started at placement") are
 * running in the store before their agent has heard of them, so a heartbeat that does not list
 * one is evidence that the agent never got it only if it was sent after the answer that carried
 * it arrived: `notEvidence` names those a heartbeat cannot speak for (offered after it arrived,
 * or less than a grace before). Another replica does not know them either; there the time rule
 * of machineHeartbeat alone (started more than two periods before) guards them.
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

  /** A report's answer carried these assignments to the machine's agent; `started`: those of them started at placement. */
  offered(machineId: string, attemptIds: readonly string[], now: number, started: ReadonlySet<string> = NONE): void {
    const m = this.machine(machineId, now);
    const seq = ++this.seq;
    for (const id of attemptIds) put(m.offers, id, { seq, at: now, started: started.has(id) });
  }

  /**
   * The machine's attempts started at placement that a heartbeat cannot be evidence against,
   * listed or not: offered after `mark` (the heartbeat arrived before the answer was given), or
   * offered after `graceFrom` (its answer may still be on its way to the agent, or being read).
   */
  notEvidence(machineId: string, mark: number, graceFrom: number): string[] {
    const offers = this.byMachine.get(machineId)?.offers;
    if (!offers) return [];
    const out: string[] = [];
    for (const [id, o] of offers) if (o.started && (o.seq > mark || o.at > graceFrom)) out.push(id);
    return out;
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

const NONE: ReadonlySet<string> = new Set();

interface MachineMemory {
  /** Attempt id → the offer's sequence number and time, and whether it was started at placement; oldest first. */
  offers: Map<string, { seq: number; at: number; started: boolean }>;
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
