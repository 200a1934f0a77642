import { closeSync, fstatSync, openSync, readSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { JOURNAL_FILE } from '../src/agent/disk/attempt-journal.js';

/**
 * When each attempt's process started on an agent: its journal's pid record, written right after
 * the spawn with the agent's clock (the bench's machine's, the server's too), read while a round
 * runs. The agent rewrites its journal now and then (a new file renamed over the old one, docs/agent.md,
 * "The journal"): the file is read by descriptor as it grows, and once its name points to a new
 * one, the old is read to its end first, so no record is missed however often it is looked at.
 *
 * Why: an attempt started at placement is written `running` before its agent has heard of it, so
 * its `started_at` is no longer its process's start, and a wait measured to it would shrink by a
 * round trip without a stage starting sooner (docs/throughput.md, "Started at placement").
 */
export class JournalSpawns {
  /** Attempt id → when its process was started (ms since the epoch). */
  readonly at = new Map<string, number>();
  /**
   * Attempt id → the other moments of its journal (ms since the epoch, the agent's clock), for the
   * bench's phases of B after A (GANTRY_BENCH_PHASES): its assignment received (absent before the
   * journal's `at`), its exit seen (the exit record's `finishedAt`: before it is made durable and
   * reported), and its outcome's answer received (the `reported` record's `at`: the answer whose
   * assignments, under load, carry the next stages).
   */
  readonly assignedAt = new Map<string, number>();
  readonly exitAt = new Map<string, number>();
  readonly reportedAt = new Map<string, number>();
  /** Attempts whose assignment came started at placement (no acknowledgement: docs/agent.md, "Started at placement"). */
  readonly startedAtPlacement = new Set<string>();
  private fd: number | null = null;
  private ino = -1;
  private pos = 0;
  private rest = '';
  private readonly path: string;
  private readonly timer: NodeJS.Timeout;

  constructor(agentDataDir: string, everyMs = 200) {
    this.path = join(agentDataDir, JOURNAL_FILE);
    this.timer = setInterval(() => this.poll(), everyMs);
  }

  /** Reads what is new, and stops. */
  stop(): void {
    clearInterval(this.timer);
    this.poll();
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }

  private poll(): void {
    if (this.fd === null) {
      try {
        this.fd = openSync(this.path, 'r');
      } catch {
        return;
      }
      this.ino = fstatSync(this.fd).ino;
      this.pos = 0;
      this.rest = '';
    }
    this.drain(this.fd);
    let ino: number;
    try {
      ino = statSync(this.path).ino;
    } catch {
      return;
    }
    if (ino === this.ino) return;
    // Renamed over: what was appended to the old file before that is still read through its descriptor.
    this.drain(this.fd);
    closeSync(this.fd);
    this.fd = null;
    this.poll();
  }

  private drain(fd: number): void {
    const buf = Buffer.alloc(1 << 20);
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, this.pos);
      if (n <= 0) return;
      this.pos += n;
      const lines = (this.rest + buf.toString('utf8', 0, n)).split('\n');
      this.rest = lines.pop()!;
      for (const l of lines) {
        if (l.includes('"pid":{')) {
          const r = JSON.parse(l) as { id: string; pid: { at?: number } };
          if (typeof r.pid.at === 'number' && !this.at.has(r.id)) this.at.set(r.id, r.pid.at);
        } else if (l.includes('"assignment":{')) {
          const r = JSON.parse(l) as { id: string; at?: number; assignment: { started?: boolean } };
          if (typeof r.at === 'number' && !this.assignedAt.has(r.id)) this.assignedAt.set(r.id, r.at);
          if (r.assignment.started === true) this.startedAtPlacement.add(r.id);
        } else if (l.includes('"exit":{')) {
          const r = JSON.parse(l) as { id: string; exit: { finishedAt?: string } };
          if (r.exit.finishedAt && !this.exitAt.has(r.id)) this.exitAt.set(r.id, Date.parse(r.exit.finishedAt));
        } else if (l.includes('"reported":{')) {
          const r = JSON.parse(l) as { id: string; reported: { at?: string } };
          if (r.reported.at && !this.reportedAt.has(r.id)) this.reportedAt.set(r.id, Date.parse(r.reported.at));
        }
      }
    }
  }
}
