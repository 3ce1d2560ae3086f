/**
 * The request limits the SDK checks before anything is sent, the same as
 * the server's (`types/src/limits.rs`); each message names the field and
 * the limit.
 */

import { InvalidError } from "./errors.js";

export const NAMESPACE_BYTES_MAX = 256;
export const KEY_BYTES_MAX = 2048;
export const VALUE_BYTES_MAX = 65_536;
export const HOLDER_BYTES_MAX = 256;
export const LEASE_TTL_MICROS_MAX = 24n * 3600n * 1_000_000n;
export const GET_MANY_KEYS_MAX = 1000;
export const SCAN_PAGE_ENTRIES_MAX = 1000;
const U64_MAX = (1n << 64n) - 1n;

const encoder = new TextEncoder();

function overLimit(field: string, amount: string, limitName: string, limit: number | bigint): InvalidError {
  return new InvalidError(`${field} is ${amount}, over the limit ${limitName} = ${limit}`);
}

export function checkNamespace(namespace: string): void {
  const size = encoder.encode(namespace).length;
  if (size === 0) throw new InvalidError("namespace must not be empty");
  if (namespace.startsWith("\0")) {
    throw new InvalidError("namespace must not start with a NUL character (reserved for Lode's own records)");
  }
  if (size > NAMESPACE_BYTES_MAX) {
    throw overLimit("namespace", `${size} bytes`, "namespace_bytes_max", NAMESPACE_BYTES_MAX);
  }
}

export function checkKey(key: Uint8Array, field = "key"): void {
  if (!(key instanceof Uint8Array)) throw new InvalidError(`${field} must be a Uint8Array`);
  if (key.length === 0) throw new InvalidError(`${field} must not be empty`);
  if (key.length > KEY_BYTES_MAX) throw overLimit(field, `${key.length} bytes`, "key_bytes_max", KEY_BYTES_MAX);
}

export function checkValue(value: Uint8Array): void {
  if (value.length > VALUE_BYTES_MAX) {
    throw overLimit("value", `${value.length} bytes`, "value_bytes_max", VALUE_BYTES_MAX);
  }
}

export function checkHolder(holder: string): void {
  const size = encoder.encode(holder).length;
  if (size === 0) throw new InvalidError("holder must not be empty");
  if (size > HOLDER_BYTES_MAX) throw overLimit("holder", `${size} bytes`, "holder_bytes_max", HOLDER_BYTES_MAX);
}

export function checkLeaseTtl(ttlMicros: bigint): void {
  if (ttlMicros <= 0n || ttlMicros > LEASE_TTL_MICROS_MAX) {
    throw new InvalidError(`lease ttl must be 1 to lease_ttl_micros_max = ${LEASE_TTL_MICROS_MAX} microseconds`);
  }
}

export function checkU64(field: string, value: bigint): void {
  if (typeof value !== "bigint") throw new InvalidError(`${field} must be a bigint`);
  if (value < 0n || value > U64_MAX) throw new InvalidError(`${field} is ${value}, outside the unsigned 64-bit range`);
}

/** A lease TTL given in milliseconds, checked, as the wire's micros. */
export function leaseTtlMicros(ttlMs: number): string {
  checkMilliseconds("ttlMs", ttlMs);
  const micros = BigInt(ttlMs) * 1000n;
  checkLeaseTtl(micros);
  return micros.toString();
}

/** A whole number of milliseconds, refused otherwise. */
export function checkMilliseconds(field: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new InvalidError(`${field} is ${value}; expected a whole, non-negative number of milliseconds`);
  }
}
