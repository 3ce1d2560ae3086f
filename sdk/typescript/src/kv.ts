/** A namespace handle: every key-value operation of the KV API with the KV
 * seed's semantics (preconditions committed, never dropped; missing and
 * expired entries read as absent; bounded pages with opaque cursors). Keys
 * are `Uint8Array`s; versions, positions, tokens and micros are bigints. */

import type { Client, Consistency } from "./client.js";
import { jsonCodec, msgpackCodec, type Codec } from "./codec.js";
import { InvalidError } from "./errors.js";
import * as limits from "./limits.js";
import {
  entryFromWire,
  leaseFromWire,
  sessionToWire,
  type EntryMeta,
  type KvEntry,
  type Lease,
  type LeaseInfo,
  type ScanPage,
  type SessionLink,
} from "./types.js";
import { fromWireBytes, optionalU64FromWire, toWireBytes, u64FromWire, type WireBytes } from "./wire.js";

export const DELETE_MANY_ENTRIES_PER_CALL = 1000;
export const SCAN_LIMIT_DEFAULT = 100;

function nowMicros(): bigint {
  return BigInt(Date.now()) * 1000n;
}

function wireKey(key: Uint8Array, field = "key"): WireBytes {
  limits.checkKey(key, field);
  return toWireBytes(key);
}

export class Kv {
  constructor(
    readonly client: Client,
    /** The name this handle was opened with. */
    readonly namespace: string,
    /** The name sent to the cluster. */
    readonly resourceNamespace: string,
    private readonly consistency: Consistency = "linearizable",
    private readonly session: SessionLink | undefined = undefined,
  ) {}

  /** A handle whose sets, compare-and-swaps, deletes and patches are linked
   * to `session`. */
  inSession(session: SessionLink): Kv {
    return new Kv(this.client, this.namespace, this.resourceNamespace, this.consistency, session);
  }

  /** A handle whose reads use `consistency`. */
  withConsistency(consistency: Consistency): Kv {
    return new Kv(this.client, this.namespace, this.resourceNamespace, consistency, this.session);
  }

  /** @internal */
  sessionWire(): { stream: string; session_id: string } | undefined {
    return this.session === undefined ? undefined : sessionToWire(this.session);
  }

  /** @internal One operation as its own write: its result and position. */
  async writeOne(operation: Record<string, unknown>, capability = "kv"): Promise<Record<string, unknown>> {
    limits.checkNamespace(this.resourceNamespace);
    await this.client.require(capability);
    const answer = await this.client.write([operation]);
    return { ...answer.results[0], position: answer.position };
  }

  /** @internal */
  async readOne(query: Record<string, unknown>, consistency?: Consistency): Promise<Record<string, unknown>> {
    limits.checkNamespace(this.resourceNamespace);
    await this.client.require("kv");
    return this.client.read(query, consistency ?? this.consistency);
  }

  /** Starts a write of `key`: choose the value, then `.send()`, or set a
   * precondition and `.commit()`. */
  set(key: Uint8Array): SetBuilder {
    return new SetBuilder(this, wireKey(key), undefined);
  }

  /** A write that applies only while the lease `fenceKey` of
   * `fenceNamespace` is held with `token`; needs a precondition and
   * `.commit()`. */
  casFenced(key: Uint8Array, fenceNamespace: string, fenceKey: Uint8Array, token: bigint): SetBuilder {
    limits.checkU64("token", token);
    const fence = {
      namespace: this.client.resourceNamespace(fenceNamespace),
      key: wireKey(fenceKey, "fenceKey"),
      token: token.toString(),
    };
    return new SetBuilder(this, wireKey(key), fence);
  }

  /** The value at `key`, or undefined when absent or expired. */
  async get(key: Uint8Array): Promise<Uint8Array | undefined> {
    return (await this.getEntry(key))?.value;
  }

  /** The value decoded as JSON, checked by `decode` when given. */
  async getTyped<T = unknown>(key: Uint8Array, decode?: (value: unknown) => T): Promise<T | undefined> {
    const value = await this.getAs(key, jsonCodec);
    if (value === undefined) return undefined;
    return decode === undefined ? (value as T) : decode(value);
  }

  async getAs<T>(key: Uint8Array, codec: Codec<T>): Promise<T | undefined> {
    const value = await this.get(key);
    return value === undefined ? undefined : codec.decode(value);
  }

  /** The entry at `key`: value, key, version, expiry and source. */
  async getEntry(key: Uint8Array): Promise<KvEntry | undefined> {
    return this.entry(key, undefined);
  }

  /** The entry once the serving member has applied `position`; `stale`
   * when it does not catch up in time. */
  async getEntryAtLeast(key: Uint8Array, position: bigint): Promise<KvEntry | undefined> {
    limits.checkU64("position", position);
    return this.entry(key, { at_least: position.toString() });
  }

  private async entry(key: Uint8Array, consistency: Consistency | undefined): Promise<KvEntry | undefined> {
    const answer = await this.readOne({ op: "get", namespace: this.resourceNamespace, key: wireKey(key) }, consistency);
    return answer.entry === null ? undefined : entryFromWire(answer.entry);
  }

  /** The live entry's version, expiry and size without its value. */
  async exists(key: Uint8Array): Promise<EntryMeta | undefined> {
    const answer = await this.readOne({ op: "exists", namespace: this.resourceNamespace, key: wireKey(key) });
    if (answer.exists === null) return undefined;
    const meta = answer.exists as Record<string, unknown>;
    return {
      version: u64FromWire(meta.version),
      expiresAtMicros: optionalU64FromWire(meta.expires_at_micros),
      sizeBytes: u64FromWire(meta.size_bytes),
    };
  }

  /** Removes `key`; true when a live entry was removed. */
  async delete(key: Uint8Array): Promise<boolean> {
    const operation = { op: "delete", namespace: this.resourceNamespace, key: wireKey(key), session: this.sessionWire() };
    return Boolean((await this.writeOne(operation)).removed_live_entry);
  }

  /** Sets the expiry `ttlMs` from now, or clears it when left out, without
   * rewriting the value or changing its version. */
  async expire(key: Uint8Array, ttlMs?: number): Promise<void> {
    if (ttlMs !== undefined) limits.checkMilliseconds("ttlMs", ttlMs);
    await this.expireAt(key, ttlMs === undefined ? undefined : nowMicros() + BigInt(ttlMs) * 1000n);
  }

  /** Sets an absolute expiry (microseconds since the epoch), or clears it. */
  async expireAt(key: Uint8Array, epochMicros?: bigint): Promise<void> {
    const operation: Record<string, unknown> = { op: "expire", namespace: this.resourceNamespace, key: wireKey(key) };
    if (epochMicros !== undefined) {
      limits.checkU64("epochMicros", epochMicros);
      operation.expires_at_micros = epochMicros.toString();
    }
    await this.writeOne(operation);
  }

  /** Applies a JSON merge patch (RFC 7386) and returns the new version. */
  async patch(key: Uint8Array, patch: Uint8Array): Promise<bigint> {
    const operation = {
      op: "patch",
      namespace: this.resourceNamespace,
      key: wireKey(key),
      patch: toWireBytes(patch),
      session: this.sessionWire(),
    };
    return u64FromWire((await this.writeOne(operation)).version);
  }

  /** Copies the entry to `toKey`; `.intoNamespace(ns)` for another
   * namespace; finish with `.send()`. */
  copyTo(key: Uint8Array, toKey: Uint8Array): CopyBuilder {
    return new CopyBuilder(this, wireKey(key), wireKey(toKey, "toKey"), "copy");
  }

  /** Moves the entry to `toKey` in one transaction. */
  moveTo(key: Uint8Array, toKey: Uint8Array): CopyBuilder {
    return new CopyBuilder(this, wireKey(key), wireKey(toKey, "toKey"), "move");
  }

  /** One optional value per key, in the order given, from one view. */
  async getMany(keys: Uint8Array[]): Promise<(Uint8Array | undefined)[]> {
    if (keys.length > limits.GET_MANY_KEYS_MAX) {
      throw new InvalidError(`the number of keys is ${keys.length}, over the limit get_many_keys_max = ${limits.GET_MANY_KEYS_MAX}`);
    }
    const answer = await this.readOne({ op: "get_many", namespace: this.resourceNamespace, keys: keys.map((key) => wireKey(key)) });
    return (answer.entries as ({ value: unknown } | null)[]).map((entry) => (entry === null ? undefined : fromWireBytes(entry.value)));
  }

  /** Starts a bulk delete; without a bound it clears the namespace. */
  deleteMany(): DeleteManyBuilder {
    return new DeleteManyBuilder(this);
  }

  /** Starts a scan; without a bound it walks the whole namespace. */
  scan(): ScanBuilder {
    return new ScanBuilder(this);
  }

  /** Acquires the lease `key` of this namespace for `holder`; a live lease
   * is a version conflict. One acquisition runs at a time per client; when
   * its outcome stays unknown the call waits out `ttlMs` (so any grant made
   * has expired) before `AmbiguousMutationError`. */
  async lease(key: Uint8Array, holder: string, ttlMs: number): Promise<Lease> {
    limits.checkHolder(holder);
    const ttlMicros = limits.leaseTtlMicros(ttlMs);
    await this.client.require("fenced_leases");
    const operation = { op: "acquire_lease", namespace: this.resourceNamespace, key: wireKey(key), holder, ttl_micros: ttlMicros };
    return leaseFromWire(await this.client.acquireGated(operation, ttlMs));
  }

  /** Extends a held lease to `ttlMs` from now, keeping its token;
   * `leaseLost` when it is no longer held with `token`. */
  async renewLease(key: Uint8Array, holder: string, token: bigint, ttlMs: number): Promise<Lease> {
    limits.checkHolder(holder);
    limits.checkU64("token", token);
    const ttlMicros = limits.leaseTtlMicros(ttlMs);
    await this.client.require("fenced_leases");
    const operation = {
      op: "renew_lease",
      namespace: this.resourceNamespace,
      key: wireKey(key),
      holder,
      token: token.toString(),
      ttl_micros: ttlMicros,
    };
    return leaseFromWire(await this.client.write([operation]));
  }

  /** Revokes a held lease; true when one was released. */
  async release(key: Uint8Array, holder: string, token: bigint): Promise<boolean> {
    limits.checkHolder(holder);
    limits.checkU64("token", token);
    const operation = { op: "release_lease", namespace: this.resourceNamespace, key: wireKey(key), holder, token: token.toString() };
    return Boolean((await this.writeOne(operation, "fenced_leases")).released);
  }

  /** The live lease `key`: holder, token and expiry. */
  async leaseInfo(key: Uint8Array): Promise<LeaseInfo | undefined> {
    const answer = await this.readOne({ op: "lease", namespace: this.resourceNamespace, key: wireKey(key) });
    if (answer.lease === null) return undefined;
    const lease = answer.lease as Record<string, unknown>;
    return { holder: String(lease.holder), token: u64FromWire(lease.token), expiresAtMicros: u64FromWire(lease.expires_at_micros) };
  }
}

/** A write being built. */
export class SetBuilder {
  private value: Uint8Array = new Uint8Array();
  private encoding = "bytes";
  private expiresAtMicros: bigint | undefined;
  private expectedVersion: bigint | undefined;
  private absent = false;

  constructor(
    private readonly kv: Kv,
    private readonly key: WireBytes,
    private readonly fence: Record<string, unknown> | undefined,
  ) {}

  bytes(payload: Uint8Array): this {
    this.value = payload;
    this.encoding = "bytes";
    return this;
  }

  json(value: unknown): this {
    return this.encodeWith(jsonCodec, value);
  }

  msgpack(value: unknown): this {
    return this.encodeWith(msgpackCodec, value);
  }

  encodeWith<T>(codec: Codec<T>, value: T): this {
    this.value = codec.encode(value);
    this.encoding = codec.encoding;
    return this;
  }

  /** Expires `ttlMs` milliseconds from now. */
  ttl(ttlMs: number): this {
    limits.checkMilliseconds("ttlMs", ttlMs);
    this.expiresAtMicros = nowMicros() + BigInt(ttlMs) * 1000n;
    return this;
  }

  expiresAt(epochMicros: bigint): this {
    limits.checkU64("epochMicros", epochMicros);
    this.expiresAtMicros = epochMicros;
    return this;
  }

  /** Write only while the live entry is at `version`; `.commit()`. */
  expectVersion(version: bigint): this {
    limits.checkU64("version", version);
    this.expectedVersion = version;
    this.absent = false;
    return this;
  }

  /** Write only while the key holds no live entry; `.commit()`. */
  expectAbsent(): this {
    this.expectedVersion = undefined;
    this.absent = true;
    return this;
  }

  private operation(): Record<string, unknown> {
    limits.checkValue(this.value);
    const operation: Record<string, unknown> = {
      op: "set",
      namespace: this.kv.resourceNamespace,
      key: this.key,
      value: toWireBytes(this.value),
      encoding: this.encoding,
    };
    if (this.expiresAtMicros !== undefined) operation.expires_at_micros = this.expiresAtMicros.toString();
    if (this.expectedVersion !== undefined) operation.expect_version = this.expectedVersion.toString();
    if (this.absent) operation.expect_absent = true;
    if (this.fence !== undefined) operation.fence = this.fence;
    const session = this.kv.sessionWire();
    if (session !== undefined) operation.session = session;
    return operation;
  }

  /** Writes unconditionally and returns the new version; refused when a
   * precondition is set, so that a precondition is never dropped. */
  async send(): Promise<bigint> {
    if (this.fence !== undefined) throw new InvalidError("a fenced write needs expectVersion or expectAbsent and .commit()");
    if (this.expectedVersion !== undefined || this.absent) {
      throw new InvalidError(
        "a precondition (expectVersion or expectAbsent) is set: call .commit() to apply it; .send() writes unconditionally",
      );
    }
    return u64FromWire((await this.kv.writeOne(this.operation())).version);
  }

  /** Applies the guarded write and returns the new version; a changed
   * version is a version conflict carrying the current one. */
  async commit(): Promise<bigint> {
    if (this.expectedVersion === undefined && !this.absent) {
      throw new InvalidError(".commit() needs expectVersion or expectAbsent; use .send() for an unconditional write");
    }
    await this.kv.client.require("cas");
    return u64FromWire((await this.kv.writeOne(this.operation(), this.fence === undefined ? "cas" : "fenced_leases")).version);
  }
}

/** A copy or move being built. */
export class CopyBuilder {
  private toNamespace: string;

  constructor(
    private readonly kv: Kv,
    private readonly key: WireBytes,
    private readonly toKey: WireBytes,
    private readonly op: "copy" | "move",
  ) {
    this.toNamespace = kv.resourceNamespace;
  }

  /** Writes the destination in another namespace (scoped like the
   * client's namespaces). */
  intoNamespace(namespace: string): this {
    this.toNamespace = this.kv.client.resourceNamespace(namespace);
    limits.checkNamespace(this.toNamespace);
    return this;
  }

  /** Copies or moves and returns the destination's new version. */
  async send(): Promise<bigint> {
    const operation = { op: this.op, namespace: this.kv.resourceNamespace, key: this.key, to_key: this.toKey, to_namespace: this.toNamespace };
    return u64FromWire((await this.kv.writeOne(operation)).version);
  }
}

/** prefix, range and keyContains, shared by bulk deletes and scans. */
abstract class Bounds {
  protected selector: Record<string, unknown> = {};

  constructor(protected readonly kv: Kv) {}

  prefix(prefix: Uint8Array): this {
    this.selector = { prefix: toWireBytes(prefix) };
    return this;
  }

  /** Keys with start <= key < end. */
  range(start: Uint8Array, end: Uint8Array): this {
    this.selector = { start: toWireBytes(start), end: toWireBytes(end) };
    return this;
  }

  /** UTF-8 keys containing `text`; keys that are not UTF-8 are skipped. */
  keyContains(text: string): this {
    this.selector = { key_contains: text };
    return this;
  }
}

export class DeleteManyBuilder extends Bounds {
  /** Removes the selected entries; each round trip is atomic on its own. */
  async send(): Promise<bigint> {
    let removed = 0n;
    let after: unknown = null;
    for (;;) {
      const operation: Record<string, unknown> = {
        op: "delete_range",
        namespace: this.kv.resourceNamespace,
        entries_max: DELETE_MANY_ENTRIES_PER_CALL,
        ...this.selector,
      };
      if (after !== null) operation.after = after;
      const result = await this.kv.writeOne(operation);
      removed += BigInt(Number(result.removed));
      after = result.resume_after;
      if (after === null) return removed;
    }
  }
}

export class ScanBuilder extends Bounds {
  private pageLimit = SCAN_LIMIT_DEFAULT;
  private resume: string | undefined;

  /** Entries per page (1 to 1000). */
  limit(limit: number): this {
    if (!Number.isInteger(limit) || limit < 1 || limit > limits.SCAN_PAGE_ENTRIES_MAX) {
      throw new InvalidError(`limit is ${limit}, outside 1 to scan_page_entries_max = ${limits.SCAN_PAGE_ENTRIES_MAX}`);
    }
    this.pageLimit = limit;
    return this;
  }

  /** Continues from a cursor an earlier page returned. */
  cursor(cursor: string): this {
    this.resume = cursor;
    return this;
  }

  /** One page and the cursor for the next. */
  async fetch(): Promise<ScanPage> {
    const query: Record<string, unknown> = { op: "scan", namespace: this.kv.resourceNamespace, limit: this.pageLimit, ...this.selector };
    if (this.resume !== undefined) query.cursor = this.resume;
    const answer = await this.kv.readOne(query);
    return {
      entries: (answer.entries as unknown[]).map(entryFromWire),
      cursor: answer.cursor === null ? undefined : String(answer.cursor),
    };
  }

  /** Every selected entry, page after page; never a key twice. */
  async *entries(): AsyncGenerator<KvEntry> {
    for (;;) {
      const page = await this.fetch();
      yield* page.entries;
      if (page.cursor === undefined) return;
      this.resume = page.cursor;
    }
  }
}

/** A session that key-value writes can name: `reference()` is its link,
 * and `kv(namespace)` a handle already linked to it. */
export class Session {
  constructor(
    private readonly client: Client,
    private readonly link: SessionLink,
  ) {}

  reference(): SessionLink {
    return { ...this.link };
  }

  kv(namespace: string): Kv {
    return this.client.kv(namespace).inSession(this.link);
  }
}
