import type { Kysely, Transaction } from 'kysely';
import type { Database } from '../schema.js';

export type Db = Kysely<Database>;
export type Trx = Transaction<Database>;

export interface EventInput {
  type: string;
  message: string;
  jobId?: string | null;
  stageName?: string | null;
  attemptId?: string | null;
  machineId?: string | null;
  data?: Record<string, unknown>;
}

/**
 * What one store transaction carries besides the connection: the time it acts at, and the two
 * append-only side effects every state change has: an event row, and outbox rows that the relay
 * publishes to the bus after commit (the transactional outbox: a crash between commit and
 * publish loses nothing, since the rows are still there for the next relay pass).
 */
export class TxContext {
  wroteOutbox = false;
  constructor(
    readonly db: Trx,
    readonly now: number,
  ) {}

  async event(e: EventInput): Promise<void> {
    await this.db
      .insertInto('events')
      .values({
        at: this.now,
        type: e.type,
        job_id: e.jobId ?? null,
        stage_name: e.stageName ?? null,
        attempt_id: e.attemptId ?? null,
        machine_id: e.machineId ?? null,
        message: e.message,
        data: JSON.stringify(e.data ?? {}),
      } as never)
      .execute();
  }

  async publish(topic: string, payload: Record<string, unknown>): Promise<void> {
    await this.db
      .insertInto('outbox')
      .values({ topic, payload: JSON.stringify(payload), created_at: this.now, published_at: null } as never)
      .execute();
    this.wroteOutbox = true;
  }
}
