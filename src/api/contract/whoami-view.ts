import { Type, type Static } from 'typebox';

/** `GET /v1/whoami`: the token a request came with, as its holder may know it (never the token itself). */
export const WhoAmIView = Type.Object({
  tokenId: Type.String(),
  kind: Type.Union([Type.Literal('admin'), Type.Literal('team')]),
  /** A team token's team: it sees that team's jobs only. */
  team: Type.Union([Type.String(), Type.Null()]),
  name: Type.String(),
});
export type WhoAmIView = Static<typeof WhoAmIView>;
