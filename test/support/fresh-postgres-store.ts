import type { KyselyStore } from '../../src/store/kysely/kysely-store.js';
import { dropPostgresSchema, openPostgresStore } from '../../src/store/postgres/open-postgres-store.js';
import { freshSchema, POSTGRES_URL } from './services.js';

/**
 * A migrated, empty store on the local PostgreSQL, in a schema of its own (its connections' search
 * path: unqualified names in raw SQL reach its tables), dropped when the store closes.
 */
export async function freshPostgresStore(prefix?: string): Promise<KyselyStore> {
  const schema = freshSchema(prefix);
  const store = await openPostgresStore(POSTGRES_URL, { schema });
  const close = store.close.bind(store);
  store.close = async () => {
    await close();
    await dropPostgresSchema(POSTGRES_URL, schema);
  };
  return store;
}
