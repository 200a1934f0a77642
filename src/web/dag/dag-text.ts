import { attemptsCounted } from '../../api/contract/attempts-counted';
import type { StageView } from '../../api/contract/job-view';
import { formatDuration } from '../format/format-time';
import { formatBytes, formatCpu, formatGpuPlace, formatGpuRequest } from '../format/format-quantity';
import { DEFAULT_SIZES } from './dag-layout';

/** What a stage that has not run asks for: "2× h100 · 8 CPU", "0.25× t4 · 1 CPU", "1 CPU · 512 MiB". */
function asks(s: StageView): string {
  const r = s.resources;
  return r.gpu ? `${formatGpuRequest(r.gpu)} · ${formatCpu(r.cpuMillis)} CPU` : `${formatCpu(r.cpuMillis)} CPU · ${formatBytes(r.memoryBytes)}`;
}

/** The line under a stage's name: where it runs, or why it waits. */
function detail(s: StageView): string {
  const a = s.attempts.at(-1);
  if (s.reused) return `ran ${formatDuration(s.reused.runSeconds * 1000)}`;
  // A gang runs on its members' machines, not its last member's (docs/gangs.md).
  if ((s.state === 'running' || s.state === 'scheduled') && s.members?.length)
    return `gang of ${s.members.length} · ${s.members.map((m) => m.machine).join(', ')}`;
  if ((s.state === 'running' || s.state === 'scheduled') && a) return `${a.machine}${a.gpus.length ? ` · ${formatGpuPlace(a)}` : ''}`;
  if (s.state === 'ready') return s.pendingReason ?? `waiting in ${s.pool}`;
  if (s.state === 'pending') return `needs ${s.needs.join(', ')}`;
  if (a?.finishedAt && a.startedAt) return `${a.machine} · ${formatDuration(a.finishedAt - a.startedAt)}`;
  return s.endReason ?? s.pool;
}

/** A box's three lines in full: its name, its state and detail, and its attempts (or what it asks for, or whose outputs it reused). */
export function boxText(s: StageView): { name: string; state: string; detail: string; third: string } {
  const third = s.reused ? `from ${s.reused.jobId}` : s.attempts.length > 0 ? `attempt ${attemptsCounted(s)}/${s.maxAttempts}` : asks(s);
  return { name: s.name, state: s.state, detail: detail(s), third };
}

/** Everything a box says, uncut, for its hover title: what the box had to shorten is read here. */
export function boxTitle(s: StageView): string {
  const t = boxText(s);
  const why = s.reused ? `reused: did not run in this job; outputs from job ${s.reused.jobId}` : (s.pendingReason ?? s.endReason);
  return [`${t.name}: ${t.state} · ${t.detail}`, t.third, why && why !== t.detail ? why : null].filter((l) => l !== null).join('\n');
}

// Average glyph widths of the box's fonts (13 px semibold name, 11 px detail), with a little to
// spare so that an estimate never runs past the box's edge.
const NAME_PX = 7.7;
const DETAIL_PX = 6.6;
const PAD = 14 + 10;
/** The "reused" pill at the name's right. */
const PILL = 56;
/** Wide enough for most names and machines; a box grows to this at most, and a longer text is cut (its title has it whole). */
const MAX_WIDTH = 320;

/** One width for every box of a graph: the widest its texts need, between the default and MAX_WIDTH. */
export function boxWidth(stages: readonly StageView[]): number {
  let need = DEFAULT_SIZES.nodeWidth;
  for (const s of stages) {
    const t = boxText(s);
    need = Math.max(
      need,
      PAD + t.name.length * NAME_PX + (s.reused ? PILL : 0),
      PAD + (t.state.length + 3 + t.detail.length) * DETAIL_PX,
      PAD + t.third.length * DETAIL_PX,
    );
  }
  return Math.min(MAX_WIDTH, Math.ceil(need));
}

/** How many characters of each line fit a box `width` wide. */
export function boxChars(width: number, reused: boolean): { name: number; line: number } {
  // The epsilon: boxWidth's width for n characters gives back n, whatever the floating point.
  return { name: Math.floor((width - PAD - (reused ? PILL : 0)) / NAME_PX + 1e-9), line: Math.floor((width - PAD) / DETAIL_PX + 1e-9) };
}

/** `text` cut to `n` characters, the cut marked with an ellipsis. */
export const clip = (text: string, n: number): string => (text.length > n ? `${text.slice(0, Math.max(1, n - 1))}…` : text);
