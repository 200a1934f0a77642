import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { api, gantry, gantryUpForSuite, isTerminal, jobOf, sharedDir, until } from '../support/gantry-process.js';

/**
 * A gang stage end to end (issue 31, docs/gangs.md), with real agents as `gantry up` starts them,
 * three machines of one declared GPU each: the members meet at the rendezvous (a TCP barrier
 * written for the test: rank 0 listens on MASTER_ADDR:MASTER_PORT, every other rank connects, and
 * rank 0 tells each how many it saw), so the gang succeeds only if every member ran at once and was
 * given the same master; one member failing ends the others at once (they would sleep a minute),
 * the attempt charged once, and the gang's retry succeeds; one member's process SIGKILLed mid-run
 * does the same; two gangs that each need 3 of the 4 machines, submitted together, both finish (no
 * deadlock); a cancel kills every member. The agents advertise 127.0.0.1 and keep a range of gang
 * ports drawn per run ($GANTRY_ADVERTISE_ADDR, $GANTRY_GANG_PORTS, read by `gantry agent` as its
 * --advertise-addr and --gang-ports), so that two runs on one host do not meet at one port.
 */
describe('gangs of 3 on 4 machines', () => {
  const firstPort = 30000 + Math.floor(Math.random() * 3000) * 10;
  const g = gantryUpForSuite({
    cluster: 'machines:\n' + ['n1', 'n2', 'n3', 'n4'].map((n) => `  - { name: ${n}, cpu: 2, memory: 2Gi, gpus: { type: h100, count: 1 } }\n`).join(''),
    machines: 4,
    env: { GANTRY_ADVERTISE_ADDR: '127.0.0.1', GANTRY_GANG_PORTS: `${firstPort}-${firstPort + 9}` },
  });
  const dir = sharedDir('gantry-gang-');
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  writeFileSync(
    join(dir, 'barrier.py'),
    [
      'import os, socket, sys, time',
      "rank, world = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])",
      "addr, port = os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT'])",
      "names = ['GANTRY_GANG_SIZE', 'GANTRY_GANG_RANK', 'GANTRY_GANG_MASTER_ADDR', 'GANTRY_GANG_MASTER_PORT', 'MASTER_ADDR', 'MASTER_PORT', 'WORLD_SIZE', 'RANK', 'NODE_RANK', 'LOCAL_WORLD_SIZE', 'CUDA_VISIBLE_DEVICES']",
      `out = open('${dir}/rank-%d.env' % rank, 'w')`,
      "out.write(''.join('%s=%s\\n' % (k, os.environ.get(k, '')) for k in names))",
      'if rank == 0:',
      '    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", port)); s.listen(world)',
      '    peers = [s.accept()[0] for _ in range(world - 1)]',
      '    for c in peers: c.sendall(str(len(peers) + 1).encode()); c.close()',
      '    seen = len(peers) + 1',
      'else:',
      '    for _ in range(150):',
      '        try: c = socket.create_connection((addr, port), timeout=2); break',
      '        except OSError: time.sleep(0.2)',
      '    else: sys.exit(3)',
      '    seen = int(c.recv(16).decode())',
      "out.write('SEEN=%d\\n' % seen); out.close()",
      "print('rank %d met %d' % (rank, seen), flush=True)",
      'sys.exit(0 if seen == world else 4)',
    ].join('\n'),
  );

  const post = async (body: unknown) => {
    const r = await api(g().url, '/v1/jobs', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    return r.body.id as string;
  };
  const gang = (name: string, command: string[], retry?: object) => ({
    name,
    stages: [
      {
        name: 'train',
        resources: { machines: 3, cpu: 1, memory: '256Mi', gpu: { count: 1, type: 'h100' } },
        timeoutSeconds: 90,
        command,
        ...(retry ? { retry } : {}),
      },
    ],
  });
  type Attempt = { number: number; machine: string; state: string; reason: string | null; releasedAt?: number | null };
  /** Each attempt number's machines: three distinct ones per attempt. */
  const distinctMachines = (attempts: Attempt[], n: number) => new Set(attempts.filter((a) => a.number === n).map((a) => a.machine)).size;
  const envOf = (rank: number) =>
    Object.fromEntries(
      readFileSync(join(dir, `rank-${rank}.env`), 'utf8')
        .trim()
        .split('\n')
        .map((l) => l.split('=', 2)),
    );

  it('every member meets at the rendezvous, with its rank and the same master, and the gang succeeds', async () => {
    const id = await post(gang('ddp', ['python3', join(dir, 'barrier.py')]));
    const j = await until('the gang to end', () => jobOf(g().url, id), isTerminal, 60_000);
    expect(j.state, JSON.stringify(j.stages[0])).toBe('succeeded');
    const attempts = j.stages[0].attempts as Attempt[];
    expect(attempts.map((a) => [a.number, a.state])).toEqual([
      [1, 'succeeded'],
      [1, 'succeeded'],
      [1, 'succeeded'],
    ]);
    expect(distinctMachines(attempts, 1)).toBe(3);
    // Rank 0's machine as its agent registered it: the advertised address, the gang ports it keeps.
    const rank0 = await api(g().url, `/v1/machines/${attempts[0]!.machine}`);
    expect(rank0.body).toMatchObject({ address: '127.0.0.1', gangPorts: { first: firstPort, last: firstPort + 9 } });
    const envs = [0, 1, 2].map(envOf);
    for (const [rank, env] of envs.entries()) {
      expect(env).toMatchObject({
        GANTRY_GANG_SIZE: '3',
        WORLD_SIZE: '3',
        GANTRY_GANG_RANK: String(rank),
        RANK: String(rank),
        NODE_RANK: String(rank),
        LOCAL_WORLD_SIZE: '1',
        SEEN: '3',
      });
      expect(env.MASTER_ADDR).toBe(envs[0]!.MASTER_ADDR);
      expect(env.GANTRY_GANG_MASTER_ADDR).toBe(env.MASTER_ADDR);
      // The lowest port of rank 0's range: no other gang holds one there.
      expect([env.MASTER_ADDR, env.MASTER_PORT]).toEqual(['127.0.0.1', String(firstPort)]);
      expect(env.CUDA_VISIBLE_DEVICES).toBeTruthy();
    }
    // Each member's log is its own (docs/gangs.md, "Seen as one and as parts"); followed, each read ends once complete.
    const logs = (...args: string[]) => gantry(['logs', id, 'train', ...args, '-f', '--server', g().url]);
    expect((await logs('--rank', '2')).stdout).toBe('rank 2 met 3\n');
    const all = await logs('--rank', 'all');
    expect(all.stdout.split('\n').filter(Boolean).sort()).toEqual([0, 1, 2].map((r) => `[rank ${r}] rank ${r} met 3`));
  });

  it('a member failing ends the others at once, charged once; the retry runs the whole gang again', async () => {
    // Attempt 1: rank 1 fails after a second; the others would sleep a minute. Attempt 2: all succeed.
    const script = 'if [ "$GANTRY_ATTEMPT" = 1 ]; then if [ "$RANK" = 1 ]; then sleep 1; exit 7; fi; sleep 60; fi; exit 0';
    const id = await post(gang('ddp-retry', ['sh', '-c', script], { maxAttempts: 3, backoff: { initialSeconds: 1, maxSeconds: 2 } }));
    const j = await until('the gang to end', () => jobOf(g().url, id), isTerminal, 45_000);
    expect(j.state, JSON.stringify(j.stages[0])).toBe('succeeded');
    expect(j.stages[0].attemptsUsed).toBe(1);
    const attempts = j.stages[0].attempts as Attempt[];
    const ended = 'gang member rank 1 failed (exit code 7): ending ranks 0, 2';
    expect(attempts.map((a) => [a.number, a.state, a.reason])).toEqual([
      [1, 'canceled', ended],
      [1, 'failed', null],
      [1, 'canceled', ended],
      [2, 'succeeded', null],
      [2, 'succeeded', null],
      [2, 'succeeded', null],
    ]);
    expect([distinctMachines(attempts, 1), distinctMachines(attempts, 2)]).toEqual([3, 3]);
  });

  it("a member's process SIGKILLed mid-run ends every member, charged once; the retry runs the whole gang again", async () => {
    // Each member writes its pid (exec: the pid is the member's process itself), then attempt 1 sleeps a minute.
    const script = `echo $$ > ${dir}/pid-$GANTRY_ATTEMPT-$RANK; if [ "$GANTRY_ATTEMPT" = 1 ]; then exec sleep 60; fi; exit 0`;
    const id = await post(gang('ddp-kill', ['sh', '-c', script], { maxAttempts: 3, backoff: { initialSeconds: 1, maxSeconds: 2 } }));
    await until(
      'every member running',
      () => jobOf(g().url, id),
      (j) => (j.stages[0].attempts as Attempt[]).filter((a) => a.state === 'running').length === 3,
      30_000,
    );
    const pid = await until(
      "rank 1's pid",
      async () => {
        try {
          return Number(readFileSync(join(dir, 'pid-1-1'), 'utf8'));
        } catch {
          return 0;
        }
      },
      (p) => p > 0,
      10_000,
    );
    process.kill(pid, 'SIGKILL');
    const j = await until('the gang to end', () => jobOf(g().url, id), isTerminal, 45_000);
    expect(j.state, JSON.stringify(j.stages[0])).toBe('succeeded');
    expect(j.stages[0].attemptsUsed).toBe(1);
    const attempts = j.stages[0].attempts as Attempt[];
    expect(attempts.map((a) => [a.number, a.state])).toEqual([
      [1, 'canceled'],
      [1, 'failed'],
      [1, 'canceled'],
      [2, 'succeeded'],
      [2, 'succeeded'],
      [2, 'succeeded'],
    ]);
    for (const i of [0, 2]) expect(attempts[i]!.reason).toMatch(/^gang member rank 1 failed \(.*SIGKILL.*\): ending ranks 0, 2$/);
    // Every member of attempt 1 released: each agent saw its process gone (the two others well before their minute).
    expect(attempts.filter((a) => a.number === 1).every((a) => a.releasedAt)).toBe(true);
  });

  it('two gangs that each need 3 of the 4 machines, submitted together, both finish', async () => {
    const ids = [await post(gang('a', ['sleep', '2'])), await post(gang('b', ['sleep', '2']))];
    for (const id of ids) {
      const j = await until('both gangs to end', () => jobOf(g().url, id), isTerminal, 60_000);
      expect(j.state, JSON.stringify(j.stages[0])).toBe('succeeded');
      expect(distinctMachines(j.stages[0].attempts as Attempt[], 1)).toBe(3);
    }
  });

  it('a cancel kills every member', async () => {
    const id = await post(gang('long', ['sleep', '60']));
    await until(
      'every member running',
      () => jobOf(g().url, id),
      (j) => (j.stages[0].attempts as Attempt[]).filter((a) => a.state === 'running').length === 3,
      30_000,
    );
    const r = await api(g().url, `/v1/jobs/${id}/cancel`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    // Released: each member's agent killed its process and stopped listing it (well before its minute).
    const j = await until(
      'every member killed',
      () => jobOf(g().url, id),
      (j) => (j.stages[0].attempts as Attempt[]).every((a) => a.state === 'canceled' && a.releasedAt),
      30_000,
    );
    expect(j.state).toBe('canceled');
  });
});
