import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, gantry, REPO, until, useServerToken } from '../support/gantry-process.js';

function hasOpenssl(): boolean {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

const openssl = hasOpenssl();
if (!openssl) console.warn('tls.e2e.test.ts skipped: no openssl to make a certificate with');

/**
 * TLS end to end (docs/security.md): a server with a self-signed certificate, the CLI and an agent
 * that trust it with --ca, and the refusals: an untrusted certificate, plain HTTP to another
 * host from a client, a server offered to the network without TLS.
 */
describe.skipIf(!openssl)('TLS, end to end', () => {
  let dir: string;
  let url = '';
  const procs: ChildProcess[] = [];
  const cert = () => join(dir, 'cert.pem');
  const key = () => join(dir, 'key.pem');

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-tls-'));
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-keyout',
        key(),
        '-out',
        cert(),
        '-days',
        '1',
        '-subj',
        '/CN=localhost',
        '-addext',
        'subjectAltName=IP:127.0.0.1,DNS:localhost',
      ],
      { stdio: 'ignore' },
    );
    const server = spawn(
      process.execPath,
      [CLI, 'server', '--data-dir', join(dir, 'server'), '--port', '0', '--json', '--tls-cert', cert(), '--tls-key', key()],
      { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    procs.push(server);
    let out = '';
    server.stdout.on('data', (d) => (out += d));
    server.stderr.on('data', (d) => (out += d));
    url = await until(
      'server',
      async () => /"url":"([^"]+)"/.exec(out)?.[1] ?? '',
      (u) => u !== '',
      20_000,
    );
    useServerToken(url, join(dir, 'server'));
  }, 30_000);
  afterAll(async () => {
    for (const p of procs) p.kill('SIGTERM');
    await Promise.all(procs.map((p) => (p.exitCode !== null ? Promise.resolve() : new Promise((r) => p.once('exit', r)))));
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves HTTPS; a client that does not trust the certificate stops, saying to give --ca', async () => {
    expect(url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const untrusted = await gantry(['list', '--server', url]);
    expect(untrusted.code).toBe(5);
    expect(untrusted.stderr).toMatch(/certificate is not trusted \(\w+: .*\); give the CA that signed it with --ca FILE or \$GANTRY_CA/);
    const trusted = await gantry(['list', '--server', url, '--ca', cert()]);
    expect(trusted.code, trusted.stderr).toBe(0);
  });

  it('an agent that trusts it joins and runs a stage; the job is submitted and waited for over TLS', async () => {
    const join_ = await gantry(['token', 'create', '--kind', 'join', '--name', 'tls agent', '--server', url, '--ca', cert(), '--json']);
    expect(join_.code, join_.stderr).toBe(0);
    const agent = spawn(
      process.execPath,
      [
        CLI,
        'agent',
        '--server',
        url,
        '--name',
        'tls-1',
        '--data-dir',
        join(dir, 'agent'),
        '--cpu',
        '2',
        '--memory',
        '1Gi',
        '--ca',
        cert(),
        '--token',
        JSON.parse(join_.stdout).token,
      ],
      { cwd: REPO, stdio: 'ignore' },
    );
    procs.push(agent);
    const spec = join(dir, 'job.yaml');
    writeFileSync(spec, 'name: over-tls\nstages:\n  - name: a\n    command: ["sh", "-c", "echo secure"]\n    resources: {cpu: 1, memory: 64Mi}\n');
    const r = await gantry(['submit', spec, '--wait', '--server', url, '--ca', cert()]);
    expect(r.code, r.stderr).toBe(0);
  }, 60_000);

  it('a token is never sent in clear to another host, and a server is not offered to the network without TLS', async () => {
    // Refused before anything is sent: nothing listens at this address.
    const client = await gantry(['list', '--server', 'http://10.255.255.1:7070']);
    expect(client.code).toBe(6);
    expect(client.stderr).toMatch(/plain HTTP to another host: the token would cross the network in clear.*--tls-cert.*GANTRY_ALLOW_INSECURE_HTTP=1/);
    const server = await new Promise<{ code: number | null; err: string }>((resolve) => {
      const p = spawn(process.execPath, [CLI, 'server', '--data-dir', join(dir, 'open'), '--port', '0', '--host', '0.0.0.0'], {
        cwd: REPO,
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let err = '';
      p.stderr.on('data', (d) => (err += d));
      p.on('exit', (code) => resolve({ code, err }));
    });
    expect(server.code).not.toBe(0);
    expect(server.err).toMatch(/--host 0\.0\.0\.0 without TLS would take tokens in clear from the network: give --tls-cert and --tls-key/);
  });
});
