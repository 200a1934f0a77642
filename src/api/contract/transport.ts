/**
 * Tokens travel only where they cannot be read on the way: over TLS (https), or over plain HTTP to
 * this host itself (loopback). A client (the CLI, an agent, the SDK) refuses anything else before
 * it sends a token, unless GANTRY_ALLOW_INSECURE_HTTP=1 says that the network in between is trusted
 * (docs/security.md).
 */
export function insecureTransportProblem(serverUrl: string, env: Readonly<Record<string, string | undefined>> = process.env): string | null {
  let u: URL;
  try {
    u = new URL(serverUrl);
  } catch {
    return `${serverUrl} is not a URL`;
  }
  if (u.protocol === 'https:') return null;
  if (u.protocol !== 'http:') return `${serverUrl}: only http and https are spoken`;
  if (isLoopback(u.hostname)) return null;
  if (env.GANTRY_ALLOW_INSECURE_HTTP === '1') return null;
  return (
    `${serverUrl} is plain HTTP to another host: the token would cross the network in clear. ` +
    'Start the server with --tls-cert and --tls-key and use https:// (--ca FILE for a private CA), ' +
    'or set GANTRY_ALLOW_INSECURE_HTTP=1 if the network in between is trusted'
  );
}

export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h);
}
