import { describe, expect, it } from 'vitest';
import { registerRequest } from './link/register-machine.js';
import { rendezvousFromFlags } from './rendezvous-options.js';

describe('rendezvousFromFlags', () => {
  it('reads --advertise-addr and --gang-ports, else their variables, else leaves each out', () => {
    expect(rendezvousFromFlags({ advertiseAddr: '10.1.0.7', gangPorts: '40000-40009' }, {})).toEqual({
      advertiseAddr: '10.1.0.7',
      gangPorts: { first: 40000, last: 40009 },
    });
    expect(rendezvousFromFlags({}, { GANTRY_ADVERTISE_ADDR: 'gpu-7.cluster', GANTRY_GANG_PORTS: ' 29500-29599 ' })).toEqual({
      advertiseAddr: 'gpu-7.cluster',
      gangPorts: { first: 29500, last: 29599 },
    });
    // The flag wins over the variable; an empty variable is no value.
    expect(rendezvousFromFlags({ advertiseAddr: 'fd00::7' }, { GANTRY_ADVERTISE_ADDR: 'x', GANTRY_GANG_PORTS: '' })).toEqual({ advertiseAddr: 'fd00::7' });
    expect(rendezvousFromFlags({}, {})).toEqual({});
  });

  it('refuses a bad address or range, naming the flag', () => {
    expect(() => rendezvousFromFlags({ advertiseAddr: 'node a' }, {})).toThrow('--advertise-addr "node a"');
    expect(() => rendezvousFromFlags({ gangPorts: '29500' }, {})).toThrow('--gang-ports "29500": expected FIRST-LAST');
    expect(() => rendezvousFromFlags({ gangPorts: '29600-29500' }, {})).toThrow('FIRST not above LAST');
    expect(() => rendezvousFromFlags({ gangPorts: '80-90' }, {})).toThrow('1024-65535');
    expect(() => rendezvousFromFlags({}, { GANTRY_GANG_PORTS: '60000-70000' })).toThrow('--gang-ports "60000-70000"');
  });

  it('is sent at registration inside `agent`, which servers from before it accept', () => {
    const machine = { name: 'gpu-7', cpuMillis: 1000, memoryBytes: 2 ** 30, gpus: [], gpusDeclared: false, region: null, labels: {} };
    const req = registerRequest(machine, undefined, { advertiseAddr: '10.1.0.7', gangPorts: { first: 40000, last: 40009 } });
    expect(req.agent).toMatchObject({ advertiseAddr: '10.1.0.7', gangPorts: { first: 40000, last: 40009 } });
    expect(Object.keys(registerRequest(machine).agent).sort()).toEqual(['host', 'pid', 'version']);
  });
});
