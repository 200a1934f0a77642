// The house's lint (AGENTS.md, "Checks"): typescript-eslint with the type-aware rules that catch
// what the compiler lets through in a codebase of promises and state unions. Each rule below says
// why it is here; `npm run lint` runs it, and `npm test` runs that first.
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: ['dist/**', 'node_modules/**', 'bench/results/**', '**/*.js'],
  },
  {
    files: ['**/*.ts', '**/*.tsx'],
    extends: [tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      parserOptions: {
        // The same programs the typecheck builds: Node's code (src, test, bench, scripts, the
        // configs) and the dashboard with its DOM types.
        project: ['./tsconfig.check.json', './src/web/tsconfig.json'],
        tsconfigRootDir: import.meta.dirname,
      },
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // A promise nobody awaits loses its rejection (an unhandled rejection kills the process) and
      // its ordering: a report sent "later" while the caller already moved on. Say `void` when
      // fire-and-forget is meant.
      '@typescript-eslint/no-floating-promises': 'error',
      // An async function where a callback's result is ignored (an event handler, forEach, a
      // condition) runs unobserved: its rejection is lost and `if (promise)` is always true.
      '@typescript-eslint/no-misused-promises': 'error',
      // Awaiting what is not a promise is a sign the callee changed under the caller.
      '@typescript-eslint/await-thenable': 'error',
      // A switch over a union (a state, a reject reason, an access level) with no default must name
      // every member: a new state then fails the lint where it is not handled. Write such switches
      // without a default so that the check applies.
      '@typescript-eslint/switch-exhaustiveness-check': ['error', { considerDefaultExhaustiveForUnions: true, requireDefaultForNonUnion: false }],
      // Dead locals and parameters hide the code that was meant to use them; `_name` says "unused
      // on purpose" (a callback's position, a destructured field left out).
      // A rejection must be an Error (a stack, a message); rethrowing what a catch caught is fine.
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingUnknown: true }],
      '@typescript-eslint/no-unused-vars': [
        'error',
        {
          argsIgnorePattern: '^_',
          varsIgnorePattern: '^_',
          caughtErrorsIgnorePattern: '^_',
          destructuredArrayIgnorePattern: '^_',
          ignoreRestSiblings: true,
        },
      ],
      // Left off, with the reason (AGENTS.md, "Checks"):
      // - the no-unsafe-* family and no-explicit-any: `any` enters at the edges on purpose (JSON
      //   bodies in tests, JSON columns parsed in row mappers, migrations over `Kysely<any>`, which
      //   must not depend on today's schema type); ~700 findings, most in tests' response bodies.
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-explicit-any': 'off',
      // - require-await: async methods that do not await implement an async interface (a Store
      //   verb, a Bus, a fake), and must keep rejecting rather than throwing synchronously.
      '@typescript-eslint/require-await': 'off',
    },
  },
);
