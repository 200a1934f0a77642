import { Type, type Static } from 'typebox';
import { WhoAmIView } from './whoami-view.js';

/** `POST /v1/sign-in`'s body: the one-time code from a sign-in link (`#signin=…`). */
export const SignInRequest = Type.Object({ code: Type.String({ minLength: 1, maxLength: 200 }) }, { additionalProperties: false });

/** What a sign-in code is exchanged for: the dashboard's session token (once), when it expires, and who it is. */
export const SignInView = Type.Object({
  token: Type.String(),
  expiresAt: Type.String({ format: 'date-time' }),
  who: WhoAmIView,
});
export type SignInView = Static<typeof SignInView>;
