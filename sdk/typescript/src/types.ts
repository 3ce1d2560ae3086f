/** What reads, leases and the change feed answer. */

import { fromWireBytes, optionalU64FromWire, u64FromWire } from "./wire.js";

/** The session a write belongs to: its stream (by name) and id. */
export interface SessionLink {
  stream: string;
  sessionId: string;
}

export function sessionToWire(link: SessionLink): { stream: string; session_id: string } {
  return { stream: link.stream, session_id: link.sessionId };
}

function sessionFromWire(value: unknown): SessionLink | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const fields = value as Record<string, unknown>;
  return { stream: String(fields.stream), sessionId: String(fields.session_id) };
}

/** A stored entry; its version is the log index that wrote it. */
export interface KvEntry {
  key: Uint8Array;
  value: Uint8Array;
  encoding: string;
  version: bigint;
  expiresAtMicros: bigint | undefined;
  sourceTerm: bigint;
  sourceIndex: bigint;
  session: SessionLink | undefined;
}

export function entryFromWire(value: unknown): KvEntry {
  const fields = value as Record<string, unknown>;
  return {
    key: fromWireBytes(fields.key),
    value: fromWireBytes(fields.value),
    encoding: String(fields.encoding),
    version: u64FromWire(fields.version),
    expiresAtMicros: optionalU64FromWire(fields.expires_at_micros),
    sourceTerm: u64FromWire(fields.source_term),
    sourceIndex: u64FromWire(fields.source_index),
    session: sessionFromWire(fields.session),
  };
}

/** What `exists` reports of a live entry. */
export interface EntryMeta {
  version: bigint;
  expiresAtMicros: bigint | undefined;
  sizeBytes: bigint;
}

/** A granted or renewed lease: `token` fences writes (the grant's log
 * index; renewal keeps it), `position` is the commit position to read at
 * least before a protected update. */
export interface Lease {
  token: bigint;
  ttlMs: number;
  position: bigint;
  expiresAtMicros: bigint;
}

export function leaseFromWire(answer: unknown): Lease {
  const fields = answer as { position: unknown; results: Record<string, unknown>[] };
  const result = fields.results[0] ?? {};
  return {
    token: u64FromWire(result.token),
    ttlMs: Number(u64FromWire(result.ttl_micros) / 1000n),
    position: u64FromWire(fields.position),
    expiresAtMicros: u64FromWire(result.expires_at_micros),
  };
}

/** A live lease as the store holds it. */
export interface LeaseInfo {
  holder: string;
  token: bigint;
  expiresAtMicros: bigint;
}

/** One page of a scan; pass `cursor` to continue, undefined when done. */
export interface ScanPage {
  entries: KvEntry[];
  cursor: string | undefined;
}

/** One change of one key, in commit order. */
export interface ChangeEvent {
  index: bigint;
  sequence: number;
  namespace: string;
  key: Uint8Array;
  kind: "created" | "updated" | "deleted";
  oldValue: Uint8Array | undefined;
  newValue: Uint8Array | undefined;
  encoding: string;
  version: bigint;
  /** Where the change sits in the change log: resume after it. */
  position: [bigint, number];
}

export function changeFromWire(value: unknown): ChangeEvent {
  const fields = value as Record<string, unknown>;
  const index = u64FromWire(fields.index);
  const sequence = Number(fields.sequence);
  return {
    index,
    sequence,
    namespace: String(fields.namespace),
    key: fromWireBytes(fields.key),
    kind: fields.kind as ChangeEvent["kind"],
    oldValue: fields.old_value === null ? undefined : fromWireBytes(fields.old_value),
    newValue: fields.new_value === null ? undefined : fromWireBytes(fields.new_value),
    encoding: String(fields.encoding),
    version: u64FromWire(fields.version),
    position: [index, sequence],
  };
}
