/**
 * How the KV JSON API spells bytes and 64-bit integers: UTF-8 text as a
 * string, other bytes as `{"base64": …}`; integers as decimal strings, so
 * they travel as bigint here and are never rounded.
 */

import { randomBytes } from "node:crypto";

import { KvExecutionError } from "./errors.js";

export type WireBytes = string | { base64: string };

const strictDecoder = new TextDecoder("utf-8", { fatal: true });
const encoder = new TextEncoder();

export function toWireBytes(data: Uint8Array): WireBytes {
  try {
    return strictDecoder.decode(data);
  } catch {
    return { base64: Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("base64") };
  }
}

export function fromWireBytes(value: unknown): Uint8Array {
  if (typeof value === "string") return encoder.encode(value);
  if (typeof value === "object" && value !== null && typeof (value as { base64?: unknown }).base64 === "string") {
    return new Uint8Array(Buffer.from((value as { base64: string }).base64, "base64"));
  }
  throw new KvExecutionError(`the server sent bytes as ${JSON.stringify(value)}`, { kind: "unavailable" });
}

export function u64FromWire(value: unknown): bigint {
  if (typeof value === "string" && /^[0-9]+$/.test(value)) return BigInt(value);
  throw new KvExecutionError(`the server sent an integer as ${JSON.stringify(value)}`, { kind: "unavailable" });
}

export function optionalU64FromWire(value: unknown): bigint | undefined {
  return value === null || value === undefined ? undefined : u64FromWire(value);
}

/** A fresh op id as 32 hexadecimal digits: the wall clock's milliseconds
 * in the top 48 bits, then 80 random bits. Ids made about the same time
 * sort together, which keeps the members' dedup records written in order;
 * only uniqueness is relied on. */
export function newOpId(): string {
  const millis = Date.now().toString(16).padStart(12, "0").slice(-12);
  return millis + randomBytes(10).toString("hex");
}
