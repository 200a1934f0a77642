import type { ValidationIssue } from '../spec/validation-error.js';
import { stageLimits, type JobDefinition, type StageDefinition } from './job-definition.js';

/** Every field of a stage definition, so that one added later is compared too (and refused on a reused stage). */
type Field = keyof StageDefinition;

/** Equal as normalised JSON values: key order does not matter, absent and undefined are the same. */
function same(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === undefined || b === undefined || a === null || b === null) return (a ?? null) === (b ?? null);
  if (typeof a !== 'object' || typeof b !== 'object') return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) return a.length === (b as unknown[]).length && a.every((v, i) => same(v, (b as unknown[])[i]));
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  return [...keys].every((k) => same((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}

/** The fields added to definitions after some were stored, with their defaults written out. */
function withDefaults(s: StageDefinition): StageDefinition {
  return { ...s, limits: stageLimits(s), network: s.network ?? false };
}

/**
 * What a rerun's new spec may not change (docs/rerun.md): the job's name and team, the DAG's shape
 * (stages added, removed or renamed; `needs`), and anything at all of a stage that is reused. Both
 * definitions are normalised, so a default written out is not a change. Paths are the new spec's
 * (`/spec/stages/2/command`), each message naming the stage and the field.
 */
export function rerunSpecIssues(p: { jobId: string; original: JobDefinition; next: JobDefinition; reused: ReadonlySet<string> }): ValidationIssue[] {
  const { jobId, original, next, reused } = p;
  const issues: ValidationIssue[] = [];
  if (next.name !== original.name)
    issues.push({ path: '/spec/name', message: `the job's name cannot change in a rerun: job ${jobId} is "${original.name}", not "${next.name}"` });
  if (next.team !== original.team) issues.push({ path: '/spec/team', message: `the team cannot change in a rerun: job ${jobId} is team ${original.team}'s` });
  const before = new Map(original.stages.map((s) => [s.name, s]));
  const after = new Set(next.stages.map((s) => s.name));
  for (const s of original.stages) {
    if (!after.has(s.name))
      issues.push({
        path: '/spec/stages',
        message: `stage ${s.name} of job ${jobId} is missing: a rerun keeps the job's stages (the DAG's shape cannot change)`,
      });
  }
  next.stages.forEach((s, i) => {
    const at = `/spec/stages/${i}`;
    const old = before.get(s.name);
    if (!old) {
      issues.push({
        path: `${at}/name`,
        message: `stage ${s.name} is not in job ${jobId}: a rerun cannot add or rename stages (its stages: ${original.stages.map((x) => x.name).join(', ')})`,
      });
      return;
    }
    if (!same([...s.needs].sort(), [...old.needs].sort())) {
      issues.push({ path: `${at}/needs`, message: `stage ${s.name} needs [${old.needs.join(', ')}] in job ${jobId}: a rerun cannot change the DAG's shape` });
    }
    if (!reused.has(s.name)) return;
    // A definition stored before a field existed reads as that field's default: no change.
    const a = withDefaults(old);
    const b = withDefaults(s);
    const fields = new Set<Field>([...(Object.keys(old) as Field[]), ...(Object.keys(s) as Field[])]);
    for (const f of fields) {
      if (f === 'name' || f === 'needs' || same(a[f], b[f])) continue;
      issues.push({
        path: `${at}/${f}`,
        message: `stage ${s.name} is reused from job ${jobId} and does not run again: its ${f} cannot change (rerun it with --from ${s.name} to change it)`,
      });
    }
  });
  return issues;
}
