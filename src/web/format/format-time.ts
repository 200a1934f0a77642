/** Times as people read them: "3 min ago" beside a list, the exact time on hover, durations that fit a column. */

const pad = (n: number) => String(n).padStart(2, '0');

/** "2026-12-02 14:03:09", in the browser's time zone: what a hover shows. */
export function formatAbsolute(ms: number): string {
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** "850 ms", "12 s", "3 min 05 s", "2 h 03 min", "3 d 4 h": two units at most. */
export function formatDuration(ms: number): string {
  const v = Math.max(0, ms);
  if (v < 1000) return `${Math.round(v)} ms`;
  const s = Math.floor(v / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${pad(s % 60)} s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h} h ${pad(m % 60)} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

/** "just now", "12 s ago", "3 min ago", "2 h ago", "5 d ago"; "in 30 s" for a time to come. */
export function formatRelative(ms: number, now: number): string {
  const d = now - ms;
  const a = Math.abs(d);
  if (a < 5000) return 'just now';
  const s = Math.floor(a / 1000);
  const text = s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min` : s < 86_400 ? `${Math.floor(s / 3600)} h` : `${Math.floor(s / 86_400)} d`;
  return d >= 0 ? `${text} ago` : `in ${text}`;
}
