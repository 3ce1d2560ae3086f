// The assertions the seed's Deno KV examples import from "@std/assert",
// written here so the examples run offline (deno.json maps the specifier to
// this file). Only what the examples use, with the same contracts.

export class AssertionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "AssertionError";
  }
}

function equal(a: unknown, b: unknown): boolean {
  if (Object.is(a, b)) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) {
    return false;
  }
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false;
  if (a instanceof Deno.KvU64 && b instanceof Deno.KvU64) return a.value === b.value;
  if (a instanceof Date && b instanceof Date) return a.getTime() === b.getTime();
  if (a instanceof RegExp && b instanceof RegExp) return String(a) === String(b);
  if (ArrayBuffer.isView(a) && ArrayBuffer.isView(b)) {
    const left = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    const right = new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
    return left.length === right.length && left.every((byte, index) => byte === right[index]);
  }
  if (a instanceof Set && b instanceof Set) {
    if (a.size !== b.size) return false;
    for (const item of a) {
      if (![...b].some((other) => equal(item, other))) return false;
    }
    return true;
  }
  if (a instanceof Map && b instanceof Map) {
    if (a.size !== b.size) return false;
    for (const [key, value] of a) {
      if (!b.has(key) || !equal(value, b.get(key))) return false;
    }
    return true;
  }
  const left = a as Record<string, unknown>;
  const right = b as Record<string, unknown>;
  const keys = Object.keys(left);
  if (keys.length !== Object.keys(right).length) return false;
  return keys.every((key) => Object.hasOwn(right, key) && equal(left[key], right[key]));
}

function show(value: unknown): string {
  return Deno.inspect(value, { depth: 10 });
}

export function assert(condition: unknown, message = "Expected a truthy value"): asserts condition {
  if (!condition) throw new AssertionError(message);
}

export function assertFalse(condition: unknown, message = "Expected a falsy value"): void {
  if (condition) throw new AssertionError(message);
}

export function assertEquals<T>(actual: T, expected: T, message?: string): void {
  if (!equal(actual, expected)) {
    throw new AssertionError(
      message ?? `Values are not equal.\n  actual:   ${show(actual)}\n  expected: ${show(expected)}`,
    );
  }
}

export function assertNotStrictEquals<T>(actual: T, expected: T, message?: string): void {
  if (Object.is(actual, expected)) {
    throw new AssertionError(message ?? `Expected ${show(actual)} not to be strictly equal`);
  }
}

// deno-lint-ignore no-explicit-any
type ErrorClass = new (...args: any[]) => Error;

export async function assertRejects(
  run: () => PromiseLike<unknown>,
  errorClass?: ErrorClass,
  messageIncludes?: string,
): Promise<Error> {
  let rejected: unknown;
  try {
    await run();
  } catch (error) {
    rejected = error;
  }
  if (rejected === undefined) throw new AssertionError("Expected the function to reject");
  if (!(rejected instanceof Error)) throw new AssertionError(`Rejected with a non-error: ${show(rejected)}`);
  const error: Error = rejected;
  if (errorClass && !(error instanceof errorClass)) {
    throw new AssertionError(`Expected a ${errorClass.name}, got ${rejected.name}: ${rejected.message}`);
  }
  if (messageIncludes !== undefined && !rejected.message.includes(messageIncludes)) {
    throw new AssertionError(`Expected the message to include ${show(messageIncludes)}, got ${show(rejected.message)}`);
  }
  return rejected;
}
