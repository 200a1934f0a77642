/**
 * A spec, a request or a file that is wrong, with every problem found and where it is. It is the
 * spec language's own error (the CLI throws it reading a job file, the API reading a body), so it
 * lives here, where both can import it; the API maps it to a 400 (src/api/error-handler.ts).
 */
export interface ValidationIssue {
  /** JSON path of the offending field, e.g. "/stages/2/resources/memory". */
  path: string;
  message: string;
}

export class ValidationError extends Error {
  readonly issues: ValidationIssue[];
  constructor(issues: ValidationIssue[]) {
    super(issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join('; '));
    this.name = 'ValidationError';
    this.issues = issues;
  }
}
