import { Type } from 'typebox';

/** A job's path parameter, and a stage's: an id longer than any the server makes is refused (400). */
export const JobParams = Type.Object({ id: Type.String({ maxLength: 100 }) });
export const StageParams = Type.Object({ id: Type.String({ maxLength: 100 }), stage: Type.String({ maxLength: 200 }) });
