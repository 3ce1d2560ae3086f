/**
 * The two-phase coordination API: prepare a lease or fenced-write request
 * once, then send the prepared object as often as needed. Repeating it
 * sends the same op id and the same request bytes, so the cluster applies
 * it at most once, and an ambiguous outcome comes with its recovery.
 *
 * A `FencedLeaseClient` sends through a transport: `DedicatedKvTransport`
 * over its own connections, or any object with `send` and `reset` (and
 * optionally `ready` and `close`).
 */

import { parseConnectionString } from "./client.js";
import { AmbiguousMutationError, InvalidError, KvExecutionError, LodeError, type AmbiguousRecovery } from "./errors.js";
import { DEFAULT_OPTIONS, HttpCluster } from "./http.js";
import * as limits from "./limits.js";
import { entryFromWire, leaseFromWire, type KvEntry, type Lease } from "./types.js";
import { newOpId, toWireBytes, u64FromWire } from "./wire.js";

export const KV_LEASE_OP_VERSION = 1;
export const ATTEMPT_TIMEOUT_MS_DEFAULT = 10_000;

/** What a coordination client sends through. `send` posts the body's exact
 * bytes to a KV API path and answers its JSON (throwing `LodeError`);
 * `reset` retires the connection, stopping in-flight work first. */
export interface CoordinationTransport {
  send(path: string, body: Uint8Array, opId: string | undefined, timeoutMs: number): Promise<unknown>;
  reset(): Promise<void>;
  ready?(): Promise<void>;
  close?(): Promise<void>;
}

/** A transport over its own connections to the members a connection
 * string names. A call gets one attempt's time: an uncertain outcome is
 * reported, not retried away. Closing is final. */
export class DedicatedKvTransport implements CoordinationTransport {
  private readonly cluster: HttpCluster;
  private closed = false;

  constructor(connectionString: string) {
    const { endpoints, options } = parseConnectionString(connectionString);
    this.cluster = new HttpCluster(endpoints, options.token, DEFAULT_OPTIONS);
  }

  async ready(): Promise<void> {
    if (this.closed) throw new InvalidError("the transport is closed");
  }

  async send(path: string, body: Uint8Array, opId: string | undefined, timeoutMs: number): Promise<unknown> {
    await this.ready();
    return this.cluster.call("POST", path, body, opId, timeoutMs);
  }

  async reset(): Promise<void> {
    this.cluster.reset();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.cluster.close();
  }
}

type PreparedKind = "acquire" | "renew" | "release" | "casFenced";

/** A request validated once, with its op id and bytes fixed, bound to one
 * client and one operation. */
export class PreparedMutation {
  /** @internal */
  constructor(
    readonly clientId: string,
    readonly kind: PreparedKind,
    readonly opId: string,
    readonly body: Uint8Array,
    private readonly leaseTtlMicros: bigint,
  ) {}

  /** What to do when sending it ended ambiguous. */
  get ambiguousRecovery(): AmbiguousRecovery {
    return this.kind === "acquire" ? { kind: "waitOutLeaseTtl", ttlMicros: this.leaseTtlMicros } : { kind: "repeatPrepared" };
  }
}

export interface KvLease {
  v?: number;
  namespace: string;
  key: Uint8Array;
  holderId: string;
  leaseTtlMicros: bigint;
  subjectUserId?: string;
}

export interface KvLeaseRenew extends KvLease {
  leaseToken: bigint;
}

export interface KvRelease {
  v?: number;
  namespace: string;
  key: Uint8Array;
  holderId: string;
  leaseToken: bigint;
  subjectUserId?: string;
}

export interface KvCasFenced {
  v?: number;
  namespace: string;
  key: Uint8Array;
  value: Uint8Array;
  encoding?: string;
  expectVersion?: bigint;
  expectAbsent?: boolean;
  fenceNamespace: string;
  fenceKey: Uint8Array;
  leaseToken: bigint;
}

export interface KvGet {
  namespace: string;
  key: Uint8Array;
  position: bigint;
}

function checkVersion(v: number | undefined): void {
  if (v !== undefined && v !== KV_LEASE_OP_VERSION) {
    throw new InvalidError(`v is ${v}; this client speaks KV_LEASE_OP_VERSION = ${KV_LEASE_OP_VERSION}`);
  }
}

function wireKey(key: Uint8Array, field: string): unknown {
  limits.checkKey(key, field);
  return toWireBytes(key);
}

export class FencedLeaseClient {
  private readonly id = newOpId();
  private attemptTimeoutMs = ATTEMPT_TIMEOUT_MS_DEFAULT;
  private closed = false;

  constructor(private readonly transport: CoordinationTransport) {}

  /** A client over its own connections, opened on first use. */
  static connectDedicated(connectionString: string): FencedLeaseClient {
    return new FencedLeaseClient(new DedicatedKvTransport(connectionString));
  }

  /** How long one attempt may take, in milliseconds; zero is refused
   * before anything is sent. */
  withAttemptTimeout(timeoutMs: number): this {
    this.attemptTimeoutMs = timeoutMs;
    return this;
  }

  private prepare(kind: PreparedKind, operation: Record<string, unknown>, leaseTtlMicros: bigint): PreparedMutation {
    limits.checkNamespace(String(operation.namespace));
    const opId = newOpId();
    const body = new TextEncoder().encode(JSON.stringify({ op_id: opId, operations: [operation] }));
    return new PreparedMutation(this.id, kind, opId, body, leaseTtlMicros);
  }

  private leaseOperation(op: string, request: KvLease | KvLeaseRenew | KvRelease): Record<string, unknown> {
    checkVersion(request.v);
    limits.checkHolder(request.holderId);
    return { op, namespace: request.namespace, key: wireKey(request.key, "key"), holder: request.holderId };
  }

  private ttl(request: { leaseTtlMicros: bigint }): string {
    limits.checkU64("leaseTtlMicros", request.leaseTtlMicros);
    limits.checkLeaseTtl(request.leaseTtlMicros);
    return request.leaseTtlMicros.toString();
  }

  private token(request: { leaseToken: bigint }): string {
    limits.checkU64("leaseToken", request.leaseToken);
    return request.leaseToken.toString();
  }

  prepareAcquire(request: KvLease): PreparedMutation {
    const operation = { ...this.leaseOperation("acquire_lease", request), ttl_micros: this.ttl(request) };
    return this.prepare("acquire", operation, request.leaseTtlMicros);
  }

  prepareRenew(request: KvLeaseRenew): PreparedMutation {
    const operation = { ...this.leaseOperation("renew_lease", request), token: this.token(request), ttl_micros: this.ttl(request) };
    return this.prepare("renew", operation, request.leaseTtlMicros);
  }

  prepareRelease(request: KvRelease): PreparedMutation {
    const operation = { ...this.leaseOperation("release_lease", request), token: this.token(request) };
    return this.prepare("release", operation, 0n);
  }

  prepareCasFenced(request: KvCasFenced): PreparedMutation {
    checkVersion(request.v);
    limits.checkValue(request.value);
    if ((request.expectVersion !== undefined) === (request.expectAbsent === true)) {
      throw new InvalidError("a fenced write needs exactly one of expectVersion and expectAbsent");
    }
    const operation: Record<string, unknown> = {
      op: "set",
      namespace: request.namespace,
      key: wireKey(request.key, "key"),
      value: toWireBytes(request.value),
      encoding: request.encoding ?? "bytes",
      fence: { namespace: request.fenceNamespace, key: wireKey(request.fenceKey, "fenceKey"), token: this.token(request) },
    };
    if (request.expectVersion !== undefined) {
      limits.checkU64("expectVersion", request.expectVersion);
      operation.expect_version = request.expectVersion.toString();
    } else {
      operation.expect_absent = true;
    }
    return this.prepare("casFenced", operation, 0n);
  }

  private async definiteChecks(prepared?: PreparedMutation, kind?: PreparedKind): Promise<void> {
    if (this.closed) throw new InvalidError("the client is closed");
    if (!(this.attemptTimeoutMs > 0)) throw new InvalidError("attemptTimeout must be above zero");
    if (prepared !== undefined) {
      if (prepared.clientId !== this.id) throw new InvalidError("the prepared mutation belongs to another client");
      if (prepared.kind !== kind) throw new InvalidError(`the prepared mutation is for ${prepared.kind}, not ${kind}`);
    }
    await this.transport.ready?.();
  }

  private async send(prepared: PreparedMutation, kind: PreparedKind): Promise<unknown> {
    await this.definiteChecks(prepared, kind);
    try {
      return await this.transport.send("/kv/v1/write", prepared.body, prepared.opId, this.attemptTimeoutMs);
    } catch (error) {
      if (!(error instanceof LodeError) || !(error.detail.kind === "ambiguousMutation" || error.detail.kind === "timeout")) throw error;
      await this.transport.reset();
      throw new AmbiguousMutationError(`${error.message}; to recover: ${prepared.ambiguousRecovery.kind}`, prepared.ambiguousRecovery);
    }
  }

  /** Sends a prepared acquisition; after an ambiguous outcome wait out the
   * TTL before acquiring again (the recovery says so). */
  async acquire(prepared: PreparedMutation): Promise<Lease> {
    return leaseFromWire(await this.send(prepared, "acquire"));
  }

  /** Sends a prepared renewal; repeat it after an ambiguous outcome. */
  async renew(prepared: PreparedMutation): Promise<Lease> {
    return leaseFromWire(await this.send(prepared, "renew"));
  }

  async release(prepared: PreparedMutation): Promise<boolean> {
    const answer = (await this.send(prepared, "release")) as { results: { released?: unknown }[] };
    return Boolean(answer.results[0]?.released);
  }

  /** Sends a prepared fenced write and returns the new version. */
  async casFenced(prepared: PreparedMutation): Promise<bigint> {
    const answer = (await this.send(prepared, "casFenced")) as { results: { version?: unknown }[] };
    return u64FromWire(answer.results[0]?.version);
  }

  /** The barriered read: the entry once the serving member has applied
   * `position`. A timeout is a plain timeout; reads change nothing. */
  async get(request: KvGet): Promise<KvEntry | undefined> {
    await this.definiteChecks();
    limits.checkNamespace(request.namespace);
    limits.checkU64("position", request.position);
    const query = { op: "get", namespace: request.namespace, key: wireKey(request.key, "key") };
    const body = new TextEncoder().encode(JSON.stringify({ query, consistency: { at_least: request.position.toString() } }));
    let answer: { entry: unknown };
    try {
      answer = (await this.transport.send("/kv/v1/read", body, undefined, this.attemptTimeoutMs)) as { entry: unknown };
    } catch (error) {
      if (!(error instanceof LodeError) || !(error.detail.kind === "ambiguousMutation" || error.detail.kind === "timeout")) throw error;
      await this.transport.reset();
      throw new KvExecutionError(error.message, { kind: "timeout" });
    }
    return answer.entry === null ? undefined : entryFromWire(answer.entry);
  }

  /** Closes the client for good; later calls fail before sending. */
  async close(): Promise<void> {
    if (!this.closed) {
      this.closed = true;
      await this.transport.close?.();
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
