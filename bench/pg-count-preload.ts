/**
 * Preloaded into the throughput bench's servers (`GANTRY_BENCH_PG_COUNT=DIR`, PostgreSQL only):
 * counts every statement the server sends PostgreSQL (test/support/statement-counter.ts), the
 * conflicts refused and the time spent waiting on answers, and writes them to
 * `DIR/server-<pid>.json` when the process exits. The bench prints them per stage.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { countStatements } from '../test/support/statement-counter.js';

const dir = process.env.GANTRY_BENCH_PG_COUNT;
if (dir) {
  const counter = countStatements();
  process.on('exit', () => {
    const c = counter.snapshot();
    const top = [...c.byText].sort((a, b) => b[1] - a[1]).slice(0, 25);
    writeFileSync(
      join(dir, `server-${process.pid}.json`),
      JSON.stringify({
        total: c.total,
        statements: c.statements,
        conflicts: c.conflicts,
        waitMs: c.waitMs,
        conflictsByText: [...c.conflictsByText],
        byKind: Object.fromEntries(c.byKind),
        top,
      }),
    );
  });
}
