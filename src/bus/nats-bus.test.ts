import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstream, jetstreamManager, StorageType } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { describe, expect, it } from 'vitest';
import { NATS_URL, serviceMissing } from '../../test/support/services.js';
import { freePort } from '../../test/faults/fault-harness.js';
import { busConformance } from './bus-conformance.js';
import { NatsBus } from './nats-bus.js';

const missing = await serviceMissing('NATS', NATS_URL);

const bus = (installation: string) => new NatsBus(NatsBus.servers(NATS_URL), { installation });
async function ready<T extends NatsBus[]>(...buses: T): Promise<T> {
  await Promise.all(buses.map((b) => b.ready()));
  return buses;
}

if (missing) {
  describe('Bus conformance: nats', () => it.skip(missing, () => {}));
} else {
  busConformance('nats', {
    async open() {
      const installation = randomBytes(6).toString('hex');
      return ready(bus(installation), bus(installation));
    },
    async other() {
      return (await ready(bus(randomBytes(6).toString('hex'))))[0];
    },
  });
}

describe.skipIf(missing)('NatsBus on the wire', () => {
  it('a batch is one NATS message under gantry-bus.<installation>; what replicas of the JetStream version publish is read too', async () => {
    const installation = randomBytes(6).toString('hex');
    const [a, b] = await ready(bus(installation), bus(installation));
    const nc = await connect({ servers: NatsBus.servers(NATS_URL) });
    // What an older replica made (kept if one did here), without which its publish is not acknowledged.
    const jsm = await jetstreamManager(nc);
    const made = await jsm.streams.info('GANTRY').then(
      () => false,
      () => jsm.streams.add({ name: 'GANTRY', subjects: ['gantry.>'], storage: StorageType.Memory }).then(() => true),
    );
    try {
      // What goes over NATS, seen as any subscriber of the subjects sees it.
      const onWire: string[] = [];
      const sub = nc.subscribe(`gantry-bus.${installation}.>`, { callback: (_err, m) => void onWire.push(m.subject) });
      await nc.flush();
      const got: string[] = [];
      b.subscribe('pool:ready', (m) => void got.push(`${m.id} ${m.payload.pool}`));
      b.subscribe('capacity:freed', (m) => void got.push(`${m.id} freed`));
      await a.publishBatch({
        id: '1',
        messages: [
          { topic: 'pool:ready', payload: { pool: 'cpu' } },
          { topic: 'capacity:freed', payload: { machineId: 'm' } },
          { topic: 'pool:ready', payload: { pool: 'gpu' } },
        ],
      });
      await expect.poll(() => got.length, { timeout: 5000 }).toBe(3);
      // The test's own connection is another subscriber: NATS delivers to it apart from b's, so it
      // may see the message after b has (CI once read it empty here). Wait for it as for b.
      await expect.poll(() => onWire.length, { timeout: 5000 }).toBe(1);
      await nc.flush();
      expect(onWire).toEqual([`gantry-bus.${installation}.batch`]);
      // Replicas of the JetStream version (a rolling upgrade): one message alone, and their relay's
      // send of a batch row as it read it (topic "batch"), with a member this version does not understand.
      const js = jetstream(nc);
      await js.publish(`gantry.${installation}.pool.ready`, JSON.stringify({ id: '2', topic: 'pool:ready', payload: { pool: 'old' } }), {
        msgID: `${installation}:2`,
      });
      const row = {
        id: '3',
        topic: 'batch',
        payload: [{ topic: 'pool:ready', payload: { pool: 'x' } }, null, { topic: 'pool:ready', payload: { pool: 'y' } }],
      };
      await js.publish(`gantry.${installation}.batch`, JSON.stringify(row), { msgID: `${installation}:3` });
      await expect.poll(() => got.length, { timeout: 5000 }).toBe(6);
      expect(got).toEqual(['1.0 cpu', '1.1 freed', '1.2 gpu', '2 old', '3.0 x', '3.2 y']);
      sub.unsubscribe();
    } finally {
      if (made) await jsm.streams.delete('GANTRY').catch(() => {});
      await nc.close();
      await a.close();
      await b.close();
    }
  });
});

const NATS_SERVER = '/usr/sbin/nats-server';
const haveServer = await import('node:fs').then((fs) => fs.existsSync(NATS_SERVER));

describe.skipIf(!haveServer)('NatsBus when NATS goes away', () => {
  it('publishing fails while it is gone (the relay keeps the row), and the bus recovers by itself when it returns', async () => {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'gantry-nats-'));
    const start = () => spawn(NATS_SERVER, ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir], { stdio: 'ignore' });
    const stop = (p: ChildProcess) => new Promise<void>((r) => (p.once('exit', () => r()), p.kill('SIGKILL')));
    let server = start();
    const states: string[] = [];
    const a = new NatsBus([`nats://127.0.0.1:${port}`], { installation: 'outage', onState: (s) => states.push(s) });
    const b = new NatsBus([`nats://127.0.0.1:${port}`], { installation: 'outage' });
    try {
      await a.ready();
      await b.ready();
      const got: string[] = [];
      b.subscribe('pool:ready', (m) => got.push(m.id));
      await a.publish({ id: '1', topic: 'pool:ready', payload: { pool: 'cpu' } });
      await expect.poll(() => got, { timeout: 5000 }).toEqual(['1']);

      await stop(server);
      await expect(a.publish({ id: '2', topic: 'pool:ready', payload: { pool: 'cpu' } })).rejects.toThrow();

      server = start();
      // Back without anyone doing anything: the connection, the stream (kept in memory, so made
      // again) and each replica's consumer.
      await expect
        .poll(
          async () => {
            await a.publish({ id: `again-${Date.now()}`, topic: 'pool:ready', payload: { pool: 'cpu' } }).catch(() => {});
            return got.length;
          },
          { timeout: 15_000, interval: 300 },
        )
        .toBeGreaterThan(1);
      expect(states[0]).toBe('connected');
    } finally {
      await a.close();
      await b.close();
      await stop(server);
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);
});

describe('NatsBus with no NATS to reach', () => {
  it('says so once per outage, not on every try', async () => {
    const port = await freePort();
    const errors: unknown[] = [];
    const b = new NatsBus([`nats://127.0.0.1:${port}`], { installation: 'nobody', onError: (err) => errors.push(err) });
    // Tries every 500 ms: four or more tries in 2.2 s.
    await new Promise((r) => setTimeout(r, 2200));
    await b.close();
    expect(errors).toHaveLength(1);
  });
});

describe('a replica\'s own messages (docs/replicas.md, "The outbox and the relay")', () => {
  it('reach its own subscribers from the publish itself, not over NATS: with NATS away too, each once', async () => {
    const port = await freePort();
    const b = new NatsBus([`nats://127.0.0.1:${port}`], { installation: 'alone' });
    try {
      const got: string[] = [];
      b.subscribe('pool:ready', (m) => void got.push(m.id));
      b.subscribe('capacity:freed', (m) => void got.push(m.id));
      // NATS is not there: the publish fails (its outbox row stays for the relay to send again),
      // and this replica's own loops were woken all the same.
      await expect(b.publish({ id: '1', topic: 'pool:ready', payload: { pool: 'cpu' } })).rejects.toThrow(/not connected/);
      const batch = {
        id: '2',
        messages: [
          { topic: 'pool:ready' as const, payload: { pool: 'cpu' } },
          { topic: 'capacity:freed' as const, payload: { machineId: 'm' } },
        ],
      };
      await expect(b.publishBatch(batch)).rejects.toThrow(/not connected/);
      // The relay's next try of the same rows delivers nothing new here.
      await expect(b.publishBatch(batch)).rejects.toThrow(/not connected/);
      await new Promise((r) => setTimeout(r, 20));
      expect(got).toEqual(['1', '2.0', '2.1']);
    } finally {
      await b.close();
    }
  });
});

describe.skipIf(!haveServer)('a replica is not sent its own messages (docs/replicas.md, "What goes over NATS")', () => {
  it("NATS sends a replica's messages to the other replica only", async () => {
    const [port, monitor] = [await freePort(), await freePort()];
    const dir = mkdtempSync(join(tmpdir(), 'gantry-nats-'));
    // A NATS of its own, whose monitoring port says how many messages it sent each connection.
    const server = spawn(NATS_SERVER, ['-a', '127.0.0.1', '-p', String(port), '-m', String(monitor), '-js', '-sd', dir], { stdio: 'ignore' });
    const url = [`nats://127.0.0.1:${port}`];
    const a = new NatsBus(url, { installation: 'echo' });
    const b = new NatsBus(url, { installation: 'echo' });
    const sent = async (): Promise<number[]> => {
      const connz = (await (await fetch(`http://127.0.0.1:${monitor}/connz`)).json()) as { connections: { name?: string; out_msgs: number }[] };
      return connz.connections.filter((c) => c.name === 'gantry echo').map((c) => c.out_msgs);
    };
    try {
      await ready(a, b);
      const onB: string[] = [];
      b.subscribe('pool:ready', (m) => void onB.push(m.id));
      const before = await sent();
      for (let i = 0; i < 20; i++) await a.publish({ id: `a${i}`, topic: 'pool:ready', payload: { pool: 'cpu' } });
      await expect.poll(() => onB.length, { timeout: 5000 }).toBe(20);
      await new Promise((r) => setTimeout(r, 100));
      const after = await sent();
      // b was sent the 20; a, which published them, nothing (through JetStream each replica was
      // sent every message, its own too, and the publisher an acknowledgement for each).
      expect(after.map((n, i) => n - before[i]!).sort((x, y) => x - y)).toEqual([0, 20]);
    } finally {
      await a.close();
      await b.close();
      await new Promise<void>((r) => (server.once('exit', () => r()), server.kill('SIGKILL')));
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
