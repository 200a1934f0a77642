import type { Rendezvous } from './link/register-machine.js';

/** An address another machine can dial: a host name, an IPv4 address, or an IPv6 one without brackets (MASTER_ADDR takes it as it is). */
const ADDRESS = /^[A-Za-z0-9._:-]{1,253}$/;

/**
 * `--advertise-addr` and `--gang-ports`, or $GANTRY_ADVERTISE_ADDR and $GANTRY_GANG_PORTS
 * (docs/gangs.md, "Rendezvous"): where other machines reach this one, and the ports the server may
 * reserve here for gangs' master ports. Each absent stays absent (the host's name; the server's
 * 29500-29599). A bad one throws, naming the flag, so the agent stops before it registers.
 */
export function rendezvousFromFlags(opts: { advertiseAddr?: string; gangPorts?: string }, env: NodeJS.ProcessEnv): Rendezvous {
  const addr = opts.advertiseAddr ?? (env.GANTRY_ADVERTISE_ADDR || undefined);
  const ports = opts.gangPorts ?? (env.GANTRY_GANG_PORTS || undefined);
  const out: Rendezvous = {};
  if (addr !== undefined) {
    const a = addr.trim();
    if (!ADDRESS.test(a)) throw new Error(`--advertise-addr "${addr}": expected a host name or an IP address (letters, digits, '.', ':', '-')`);
    out.advertiseAddr = a;
  }
  if (ports !== undefined) out.gangPorts = parseGangPorts(ports);
  return out;
}

/** `FIRST-LAST`, both 1024–65535 (below are privileged: a member not run as root could not listen there), FIRST not above LAST. */
function parseGangPorts(text: string): { first: number; last: number } {
  const m = /^(\d+)-(\d+)$/.exec(text.trim());
  if (!m) throw new Error(`--gang-ports "${text}": expected FIRST-LAST, e.g. 29500-29599`);
  const first = Number(m[1]);
  const last = Number(m[2]);
  if (first < 1024 || last > 65535 || first > last)
    throw new Error(`--gang-ports "${text}": ports must lie in 1024-65535 with FIRST not above LAST (a member cannot listen on a privileged port)`);
  return { first, last };
}
