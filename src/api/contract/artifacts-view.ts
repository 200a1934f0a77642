import { Type, type Static } from 'typebox';

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(t: T) => Type.Union([t, Type.Null()]);

/** `POST /v1/artifacts/gc`: what artifact collection did, or would do with `dryRun` (docs/rerun.md). Sizes in bytes. */
export const CollectionView = Type.Object({
  dryRun: Type.Boolean(),
  /** The store before: its bytes and blobs, and its budget (null: none). */
  totalBytes: Type.Integer(),
  blobs: Type.Integer(),
  budgetBytes: Nullable(Type.Integer()),
  /** Blobs deleted (or to delete), oldest unreferenced first. */
  collect: Type.Array(
    Type.Object({
      blob: Type.String({ description: 'sha256:<hex>, or legacy:<attempt>/<path> for a file stored before content addressing' }),
      size: Type.Integer(),
      unreferencedSince: Type.Number(),
      why: Type.String({ description: 'unreferenced: no job names it; released: freed by a release below' }),
    }),
  ),
  /** Stages of ended jobs whose outputs the budget released, oldest ended first. */
  release: Type.Array(Type.Object({ jobId: Type.String(), stage: Type.String(), files: Type.Integer(), bytes: Type.Integer(), endedAt: Type.Number() })),
  bytesAfter: Type.Integer(),
  /** Files deleted, kept (written again meanwhile: judged again later), already missing; bytes freed. */
  deleted: Type.Integer(),
  kept: Type.Integer(),
  missing: Type.Integer(),
  freedBytes: Type.Integer(),
  /** More unreferenced blobs than one collection takes: the next goes on. */
  more: Type.Boolean(),
  /**
   * Files a crash left in the store (not with dryRun): blob files no row names, collected; files a
   * collection had renamed aside, put back (still named) or removed. Absent from older servers.
   */
  strays: Type.Optional(Type.Object({ collected: Type.Integer(), restored: Type.Integer(), removedAside: Type.Integer() })),
});
export type CollectionView = Static<typeof CollectionView>;
