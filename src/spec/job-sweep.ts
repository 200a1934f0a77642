/**
 * Sweeps: one job spec with a top-level `sweep:` map, expanded to one plain spec per combination
 * of its parameters' values (the cartesian product), before anything is sent to the server.
 *
 *   sweep: { lr: [0.1, 0.01], seed: [1, 2, 3] }     # 6 jobs
 *
 * - A parameter name is `[A-Za-z_][A-Za-z0-9_]*`; its values a non-empty list of distinct
 *   strings, numbers or booleans. Combinations are in order, the first parameter varying slowest.
 * - `${sweep.NAME}` in a stage's `command` items and `env` values is replaced by the value (a
 *   number as JavaScript writes it: quote it in YAML to keep its exact text, e.g. "1e-4").
 *   `$${sweep.` is a literal `${sweep.`. Any other `${sweep.` (an unknown parameter, a malformed
 *   placeholder, a placeholder elsewhere in the spec) is an error. Other `${…}`, such as a shell's
 *   `${HOME}`, are left alone.
 * - Job i is named `<name>-<p1>_<v1>-<p2>_<v2>…`, each character outside `[A-Za-z0-9._-]` written
 *   `_`; where those names would collide or pass 200 characters, `<name>-1` … `<name>-N`.
 * - At most `maxJobs` combinations (MAX_BATCH_JOBS: a sweep is submitted as one batch).
 */
import { MAX_BATCH_JOBS } from './spec-limits.js';
import { ValidationError, type ValidationIssue } from './validation-error.js';
import { describeValue, encodePointerSegment as enc, suggest } from './schema-issues.js';

export const SWEEP_PARAMETER_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;
const MAX_NAME_LENGTH = 200;

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const has = (o: Obj, k: string) => Object.prototype.hasOwnProperty.call(o, k);

/** A string with its placeholders found: literal text and parameter references, in order. */
type Template = (string | { param: string })[];

/** A stage with its command items and env values as templates (or kept raw where not strings). */
interface StageTemplate {
  others: Obj;
  command?: { items: (Template | { raw: unknown })[] } | { raw: unknown };
  env?: { entries: [string, Template | { raw: unknown }][] } | { raw: unknown };
}

const PLACEHOLDER = /\$\$\{sweep\.|\$\{sweep\.([A-Za-z_][A-Za-z0-9_]*)\}|\$\{sweep\./g;

/** Splits `text` into literals and references; reports unknown parameters and malformed placeholders. */
function template(text: string, path: string, known: readonly string[], issues: ValidationIssue[]): Template {
  const parts: Template = [];
  let last = 0;
  for (const m of text.matchAll(PLACEHOLDER)) {
    parts.push(text.slice(last, m.index));
    last = m.index + m[0].length;
    if (m[0].startsWith('$$')) {
      parts.push('${sweep.');
    } else if (m[1] === undefined) {
      issues.push({ path, message: `malformed placeholder at "${text.slice(m.index, m.index + 30)}": write \${sweep.NAME}, NAME a parameter of the sweep` });
    } else if (!known.includes(m[1])) {
      const hint = suggest(m[1], known);
      issues.push({
        path,
        message: `unknown sweep parameter "${m[1]}" in \${sweep.${m[1]}}${hint ? ` (did you mean "${hint}"?)` : ''}; the sweep has ${known.join(', ') || 'none'}`,
      });
    } else {
      parts.push({ param: m[1] });
    }
  }
  parts.push(text.slice(last));
  return parts.filter((p) => p !== '');
}

const fill = (t: Template, values: ReadonlyMap<string, string>) => t.map((p) => (typeof p === 'string' ? p : values.get(p.param)!)).join('');

/** Every string in `v` that holds a placeholder where none is substituted is an issue. */
function placeholdersOutside(v: unknown, path: string, issues: ValidationIssue[]): void {
  if (typeof v === 'string') {
    if (v.includes('${sweep.')) issues.push({ path, message: "sweep placeholders are substituted only in a stage's command and env values" });
  } else if (Array.isArray(v)) {
    v.forEach((x, i) => placeholdersOutside(x, `${path}/${i}`, issues));
  } else if (isObj(v)) {
    for (const [k, x] of Object.entries(v)) placeholdersOutside(x, `${path}/${enc(k)}`, issues);
  }
}

/** The sweep's parameters and their values as text, in order; issues for whatever is wrong. */
function sweepParameters(sweep: unknown, issues: ValidationIssue[]): [string, string[]][] {
  if (!isObj(sweep) || Object.keys(sweep).length === 0) {
    issues.push({
      path: '/sweep',
      message: `must be a mapping of parameter names to lists of values, got ${isObj(sweep) ? 'an empty mapping' : describeValue(sweep)}`,
    });
    return [];
  }
  return Object.entries(sweep).map(([name, list]) => {
    const path = `/sweep/${enc(name)}`;
    if (!SWEEP_PARAMETER_PATTERN.test(name)) {
      issues.push({ path, message: `"${name}" is not a parameter name (letters, digits and '_', not starting with a digit)` });
    }
    if (!Array.isArray(list) || list.length === 0) {
      issues.push({ path, message: `must be a non-empty list of values, got ${Array.isArray(list) ? 'an empty list' : describeValue(list)}` });
      return [name, []];
    }
    const texts: string[] = [];
    list.forEach((v, i) => {
      if (typeof v === 'string' || typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v))) {
        const text = String(v);
        if (texts.includes(text)) issues.push({ path: `${path}/${i}`, message: `duplicate value ${JSON.stringify(text)}` });
        texts.push(text);
      } else {
        issues.push({ path: `${path}/${i}`, message: `must be a string, a number or true/false, got ${describeValue(v)}` });
      }
    });
    return [name, texts];
  });
}

function jobNames(base: string, params: readonly (readonly [string, readonly string[]])[], combos: readonly (readonly string[])[]): string[] {
  const safe = (s: string) => s.replace(/[^A-Za-z0-9._-]/g, '_');
  const named = combos.map((values) => [base, ...values.map((v, i) => `${params[i]![0]}_${safe(v)}`)].join('-'));
  if (new Set(named).size === named.length && named.every((n) => n.length <= MAX_NAME_LENGTH)) return named;
  return combos.map((_, i) => `${base}-${i + 1}`);
}

/**
 * Expands a spec with `sweep:` into one spec per combination (see the top of this file); a spec
 * without one comes back alone and unchanged. Pure: the input is not modified (the specs share its
 * unchanged parts). Throws ValidationError with every problem and its path in the spec.
 */
export function expandSweep(spec: unknown, maxJobs: number = MAX_BATCH_JOBS): unknown[] {
  if (!isObj(spec) || !has(spec, 'sweep')) return [spec];
  const issues: ValidationIssue[] = [];
  const params = sweepParameters(spec.sweep, issues);
  const known = params.map(([n]) => n);

  const count = params.reduce((n, [, values]) => n * Math.max(1, values.length), 1);
  if (count > maxJobs) {
    issues.push({ path: '/sweep', message: `the sweep makes ${params.map(([, v]) => v.length).join(' × ')} = ${count} jobs; at most ${maxJobs}` });
  }

  // Templates of every command item and env value, checked once for all combinations; anything
  // else (including what is malformed: the server reports that) is kept as it is.
  const { sweep: _, stages, ...rest } = spec;
  placeholdersOutside(rest, '', issues);
  const stageTemplates = (Array.isArray(stages) ? stages : []).map((stage, i): StageTemplate | null => {
    if (!isObj(stage)) return null;
    const { command, env, ...others } = stage;
    placeholdersOutside(others, `/stages/${i}`, issues);
    const t: StageTemplate = { others };
    if (has(stage, 'command')) {
      t.command = Array.isArray(command)
        ? { items: command.map((c, j) => (typeof c === 'string' ? template(c, `/stages/${i}/command/${j}`, known, issues) : { raw: c })) }
        : { raw: command };
    }
    if (has(stage, 'env')) {
      t.env = isObj(env)
        ? { entries: Object.entries(env).map(([k, v]) => [k, typeof v === 'string' ? template(v, `/stages/${i}/env/${enc(k)}`, known, issues) : { raw: v }]) }
        : { raw: env };
    }
    return t;
  });
  if (issues.length > 0) throw new ValidationError(issues);

  const combos: string[][] = [[]];
  for (const [, values] of params) {
    const next: string[][] = [];
    for (const c of combos) for (const v of values) next.push([...c, v]);
    combos.splice(0, combos.length, ...next);
  }
  const names = typeof spec.name === 'string' ? jobNames(spec.name, params, combos) : null;
  const value = (t: Template | { raw: unknown }, values: ReadonlyMap<string, string>) => (Array.isArray(t) ? fill(t, values) : t.raw);
  return combos.map((combo, n) => {
    const values = new Map(combo.map((v, i) => [params[i]![0], v]));
    const out: Obj = { ...rest, ...(names ? { name: names[n] } : {}) };
    if (has(spec, 'stages')) {
      out.stages = Array.isArray(stages)
        ? stages.map((stage, i) => {
            const t = stageTemplates[i];
            if (!t) return stage;
            const s: Obj = { ...t.others };
            if (t.command) s.command = 'raw' in t.command ? t.command.raw : t.command.items.map((c) => value(c, values));
            if (t.env) s.env = 'raw' in t.env ? t.env.raw : Object.fromEntries(t.env.entries.map(([k, v]) => [k, value(v, values)]));
            return s;
          })
        : stages;
    }
    return out;
  });
}
