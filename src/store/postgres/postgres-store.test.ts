import { describe, it } from 'vitest';
import { freshSchema, POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { storeConformance } from '../conformance/store-conformance.js';
import { concurrentConformance } from '../conformance/concurrent-conformance.js';
import { dropPostgresSchema, openPostgresStore } from './open-postgres-store.js';

const missing = await serviceMissing('PostgreSQL', POSTGRES_URL);

/** A fresh, migrated, empty store in a schema of its own, dropped when the store closes. */
async function open() {
  const schema = freshSchema();
  const store = await openPostgresStore(POSTGRES_URL, { schema });
  const close = store.close.bind(store);
  store.close = async () => {
    await close();
    await dropPostgresSchema(POSTGRES_URL, schema);
  };
  return store;
}

if (missing) {
  describe('Store conformance: postgres', () => it.skip(missing, () => {}));
} else {
  storeConformance('postgres', open);
  concurrentConformance('postgres', open);
}
