import { connect } from 'node:net';
import { randomBytes } from 'node:crypto';

/**
 * The external services some suites need (PostgreSQL, NATS), found once per test file. Where one
 * is not reachable its suites skip and say why, except under GANTRY_REQUIRE_SERVICES=1 (set by
 * .ci/run, which starts them), where a missing service fails the run instead of skipping silently.
 */
export const POSTGRES_URL = process.env.GANTRY_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const NATS_URL = process.env.GANTRY_TEST_BUS_URL ?? 'nats://127.0.0.1:4222';

function reachable(url: string): Promise<string | null> {
  const u = new URL(url);
  const port = Number(u.port || (u.protocol === 'nats:' ? 4222 : 5432));
  return new Promise((resolve) => {
    const s = connect({ host: u.hostname, port, timeout: 1000 });
    s.once('connect', () => (s.destroy(), resolve(null)));
    s.once('timeout', () => (s.destroy(), resolve(`nothing answers at ${u.hostname}:${port} (timeout)`)));
    s.once('error', (e) => resolve(`nothing answers at ${u.hostname}:${port} (${(e as NodeJS.ErrnoException).code ?? e.message})`));
  });
}

/** Why a suite needing `url` must skip here, or null when it can run. Throws when services are required. */
export async function serviceMissing(what: string, url: string): Promise<string | null> {
  const why = await reachable(url);
  if (!why) return null;
  const message = `${what} tests skipped: ${why}; set ${what === 'PostgreSQL' ? 'GANTRY_TEST_DATABASE_URL' : 'GANTRY_TEST_BUS_URL'} to run them`;
  if (process.env.GANTRY_REQUIRE_SERVICES === '1') throw new Error(`${message} (GANTRY_REQUIRE_SERVICES=1: they must run here)`);
  console.warn(message);
  return message;
}

/** A schema name no other test uses: each PostgreSQL store in a test gets its own, dropped at close. */
export function freshSchema(prefix = 't'): string {
  return `${prefix}_${randomBytes(6).toString('hex')}`;
}
