import { Type, type Static } from 'typebox';
import { NAME_PATTERN } from './names.js';
import { TOKEN_KINDS } from './states.js';
import { wireEnum } from './wire-enum.js';

/** A token as the API shows it: never the token itself, except once, when it is made. */
export const TokenView = Type.Object({
  id: Type.String(),
  kind: wireEnum(TOKEN_KINDS),
  team: Type.Union([Type.String(), Type.Null()]),
  machineId: Type.Union([Type.String(), Type.Null()]),
  name: Type.String(),
  createdAt: Type.String({ format: 'date-time' }),
  expiresAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  revokedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
});
export type TokenView = Static<typeof TokenView>;

export const TokenCreateRequest = Type.Object(
  {
    kind: Type.Union([Type.Literal('admin'), Type.Literal('team'), Type.Literal('join')]),
    team: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 200,
        pattern: NAME_PATTERN,
        description: 'the team a team token is for (required for kind team, refused otherwise)',
      }),
    ),
    name: Type.String({ minLength: 1, maxLength: 200, pattern: '^[^\\u0000-\\u001f]+$', description: 'what it is for, for the people who read the list' }),
    expiresInDays: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 3650 })),
  },
  { additionalProperties: false },
);
export type TokenCreateRequest = Static<typeof TokenCreateRequest>;

export const TokenCreated = Type.Object({ token: Type.String({ description: 'the token itself: shown this once, kept nowhere' }), info: TokenView });
export type TokenCreated = Static<typeof TokenCreated>;
