import type { KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs, QueryResult, RootOperationNode, UnknownRow } from 'kysely';

/**
 * Counts the rows a transaction's statements changed, as the database answers them
 * (`numAffectedRows` of every insert, update and delete): what tells an optimistic part of a
 * PostgreSQL transaction that failed whether dropping what it collected in memory undoes it
 * (nothing written), or only a rollback can (docs/throughput.md, "Savepoints only when needed", PostgreSQL).
 * SQLite's direct connection keeps its own count (statement-cache.ts); this is the same for any
 * connection Kysely drives, attached to one transaction with `trx.withPlugin(counter)`.
 */
export class RowsChanged implements KyselyPlugin {
  private count = 0;

  changes(): number {
    return this.count;
  }

  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    return args.node;
  }

  transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    const n = args.result.numAffectedRows;
    if (n !== undefined) this.count += Number(n);
    return Promise.resolve(args.result);
  }
}
