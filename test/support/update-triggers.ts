import { sql } from 'kysely';
import type { KyselyStore } from '../../src/store/kysely/kysely-store.js';

/**
 * Faults for a store's tests, as triggers on updates of `table`, on either dialect (`postgres`: a
 * function and a trigger; else SQLite's `raise`). One of each kind per store.
 */
type Table = 'attempts' | 'stages';

/**
 * Every update of row `id` changes nothing, as if the row had moved between a read and the guarded
 * write that follows it: the write's `returning` then leaves it out.
 */
export async function skipUpdatesOf(store: KyselyStore, postgres: boolean, table: Table, id: string): Promise<void> {
  if (postgres)
    await sql
      .raw(
        `create function skip_it() returns trigger language plpgsql as $$ begin if old.id = '${id}' then return null; end if; return new; end $$;` +
          `create trigger skip_it before update on ${table} for each row execute function skip_it()`,
      )
      .execute(store.db);
  else await sql.raw(`create trigger skip_it before update on ${table} when old.id = '${id}' begin select raise(ignore); end`).execute(store.db);
}

/** An update of `table` fails with 'boom' when `when` (SQL on the `new` row) holds. */
export async function failUpdatesWhen(store: KyselyStore, postgres: boolean, table: Table, when: string): Promise<void> {
  if (postgres)
    await sql
      .raw(
        `create function boom() returns trigger language plpgsql as $$ begin if ${when} then raise exception 'boom'; end if; return new; end $$;` +
          `create trigger boom before update on ${table} for each row execute function boom()`,
      )
      .execute(store.db);
  else await sql.raw(`create trigger boom before update on ${table} when ${when} begin select raise(abort, 'boom'); end`).execute(store.db);
}
