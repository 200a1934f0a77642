import { SubmitWarning } from './job-view.js';
import { Type, type Static } from 'typebox';

/** What `POST /v1/jobs/batch` answers: the new jobs' ids and names, in the order submitted. */
export const JobBatchResult = Type.Object({
  jobs: Type.Array(Type.Object({ id: Type.String(), name: Type.String(), warnings: Type.Optional(Type.Array(SubmitWarning)) })),
});
export type JobBatchResult = Static<typeof JobBatchResult>;
