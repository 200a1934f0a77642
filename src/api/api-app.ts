import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyBaseLogger, FastifyInstance, RawServerDefault } from 'fastify';

/**
 * The API's Fastify instance, typed through its route schemas: a route's `body`, `params`,
 * `querystring` and replies have the types of its TypeBox schemas, so a handler reads its request
 * as the schema validated it, never through a cast. Only the types come from the provider: the
 * schemas are compiled by the API's own Ajv instances (build-api.ts), as they always were.
 */
export type ApiApp = FastifyInstance<RawServerDefault, IncomingMessage, ServerResponse, FastifyBaseLogger, TypeBoxTypeProvider>;
