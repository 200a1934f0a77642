/**
 * What a name of a job, stage or team may be (the job spec's own rule, which
 * src/api/contract-agreement.ts holds equal to it): a letter or digit first, then letters, digits,
 * '.', '_' and '-'.
 */
export const NAME_PATTERN = '^[A-Za-z0-9][A-Za-z0-9._-]*$';
