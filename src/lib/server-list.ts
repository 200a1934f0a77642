/**
 * `https://a:7070, https://b:7070/` → the URLs, trimmed, without trailing slashes (a path is
 * appended to each), empty entries dropped: what `--server`, $GANTRY_SERVER and --nats take.
 */
export function serverList(urls: string): string[] {
  return urls
    .split(',')
    .map((u) => u.trim().replace(/\/+$/, ''))
    .filter(Boolean);
}
