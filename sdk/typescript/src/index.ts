/**
 * Lode's KV API for TypeScript (Node 20+), over a member's JSON HTTP port.
 *
 *     const laser = Client.connect("http://127.0.0.1:7201,127.0.0.1:7202?token=…")
 *     const kv = laser.kv("config")
 *     const version = await kv.set(new TextEncoder().encode("service:auth")).json({ log_level: "info" }).send()
 */

export { Client, parseConnectionString, type ClientOptions, type Consistency, type WriteAnswer } from "./client.js";
export { jsonCodec, msgpackCodec, type Codec } from "./codec.js";
export {
  AmbiguousMutationError,
  InvalidError,
  KvExecutionError,
  LodeError,
  UnsupportedError,
  isAmbiguousMutation,
  isLeaseLost,
  isNotFound,
  isStale,
  isVersionConflict,
  type AmbiguousRecovery,
  type ErrorDetail,
  type ErrorKind,
} from "./errors.js";
export {
  DedicatedKvTransport,
  FencedLeaseClient,
  KV_LEASE_OP_VERSION,
  PreparedMutation,
  type CoordinationTransport,
  type KvCasFenced,
  type KvGet,
  type KvLease,
  type KvLeaseRenew,
  type KvRelease,
} from "./fenced.js";
export { CopyBuilder, DeleteManyBuilder, Kv, ScanBuilder, Session, SetBuilder } from "./kv.js";
export { decodeMsgpack, encodeMsgpack } from "./msgpack.js";
export { FileStore, InMemoryStore, KvStore, type StateStore } from "./stateStore.js";
export type { ChangeEvent, EntryMeta, KvEntry, Lease, LeaseInfo, ScanPage, SessionLink } from "./types.js";
