/** "512 B", "1.5 KiB", "12.0 GiB": sizes as people read them (binary units, as the spec's quantities). */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let n = bytes;
  let u = 0;
  while (Math.abs(n) >= 1024 && u < units.length - 1) {
    n /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${n.toFixed(1)} ${units[u]}`;
}
