import { describe, it } from 'vitest';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { storeConformance } from '../conformance/store-conformance.js';
import { concurrentConformance } from '../conformance/concurrent-conformance.js';

const missing = await serviceMissing('PostgreSQL', POSTGRES_URL);

if (missing) {
  describe('Store conformance: postgres', () => it.skip(missing, () => {}));
} else {
  storeConformance('postgres', () => freshPostgresStore());
  concurrentConformance('postgres', () => freshPostgresStore());
}
