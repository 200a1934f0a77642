import type { JobDefinition } from './job-definition.js';

/** What a secret's value is shown as, where it would otherwise be. */
export const REDACTED = '***';

/** Whether any stage of the job has secretEnv. */
export function hasSecrets(d: JobDefinition): boolean {
  return d.stages.some((s) => s.secretEnv && Object.keys(s.secretEnv).length > 0);
}

/**
 * A job spec as the user sent it, with its stages' secretEnv values replaced: what is kept as its
 * source (the spec text itself would keep the secrets in plain sight of anyone reading the jobs).
 */
export function redactSpec(input: unknown): unknown {
  if (typeof input !== 'object' || input === null || !Array.isArray((input as { stages?: unknown }).stages)) return input;
  const spec = input as { stages: unknown[] };
  return {
    ...spec,
    stages: spec.stages.map((s) => {
      const secret = (s as { secretEnv?: unknown }).secretEnv;
      if (typeof secret !== 'object' || secret === null) return s;
      return { ...(s as object), secretEnv: Object.fromEntries(Object.keys(secret).map((k) => [k, REDACTED])) };
    }),
  };
}

/**
 * `text` with every occurrence of each secret value masked, as CI systems do in their logs. Values
 * shorter than 4 characters are left: masking every "1" or "on" would mangle the log and hide
 * nothing. A value split between two pieces of a log is not found (docs/security.md).
 */
export function maskSecrets(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of secrets) if (s.length >= 4 && out.includes(s)) out = out.split(s).join(REDACTED);
  return out;
}
