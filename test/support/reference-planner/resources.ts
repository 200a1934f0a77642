// Frozen copy of normalizeGpuType from src/domain/resources.ts as of ebf6444 (before issue 32 cached
// it): the reference planner's, so that bench:placement's "before" is the code before. Test-only.
import { GPU_MILLI_WHOLE, gpuFreeMilli, gpuMilliOf } from '../../../src/domain/resources.js';

export { GPU_MILLI_WHOLE, gpuFreeMilli, gpuMilliOf };

/** GPU type names are compared case-insensitively ("H100" from nvidia-smi matches "h100"). */
export function normalizeGpuType(t: string): string {
  return t.trim().toLowerCase();
}
