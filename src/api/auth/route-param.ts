/**
 * A path parameter of whatever route a request reached: hooks that run before every route see
 * params of any route's shape (or none), so they read one by name, not through a cast.
 */
export function routeParam(params: unknown, name: string): string | undefined {
  if (typeof params !== 'object' || params === null) return undefined;
  const value: unknown = Reflect.get(params, name);
  return typeof value === 'string' ? value : undefined;
}
