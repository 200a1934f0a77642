import { createServer, type AddressInfo, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { gangPortProblem } from './gang-port-check.js';

/** A listener the test holds, as a process outside Gantry would: its port. */
async function hold(host = '127.0.0.1'): Promise<{ server: Server; port: number }> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen({ host, port: 0 }, resolve));
  return { server, port: (server.address() as AddressInfo).port };
}
const close = (s: Server) => new Promise<void>((resolve) => s.close(() => resolve()));

describe('gangPortProblem (rank 0 checks its master port before its member starts)', () => {
  const held: Server[] = [];
  afterEach(async () => {
    for (const s of held.splice(0)) await close(s);
  });

  it('names the port, the address and the flag when another process listens there', async () => {
    const { server, port } = await hold();
    held.push(server);
    expect(await gangPortProblem({ rank: 0, size: 3, masterAddr: '127.0.0.1', masterPort: port })).toBe(
      `gang master port ${port} on 127.0.0.1 is in use by another process (--gang-ports)`,
    );
  });

  it('says nothing of a free port, and leaves it free for the member to listen on at once', async () => {
    const { server, port } = await hold();
    await close(server);
    expect(await gangPortProblem({ rank: 0, size: 2, masterAddr: '127.0.0.1', masterPort: port })).toBeNull();
    // The member listens there right after the check.
    const member = createServer();
    await new Promise<void>((resolve, reject) => {
      member.once('error', reject);
      member.listen({ host: '127.0.0.1', port }, resolve);
    });
    held.push(member);
  });

  it('checks only on rank 0 (the others listen on nothing), and only for a port in use', async () => {
    const { server, port } = await hold();
    held.push(server);
    expect(await gangPortProblem({ rank: 1, size: 2, masterAddr: '127.0.0.1', masterPort: port })).toBeNull();
    expect(await gangPortProblem(undefined)).toBeNull();
    // An address that is not this host's (TEST-NET-1, RFC 5737): not a port in use, not this check's to refuse.
    expect(await gangPortProblem({ rank: 0, size: 2, masterAddr: '192.0.2.1', masterPort: port })).toBeNull();
  });
});
