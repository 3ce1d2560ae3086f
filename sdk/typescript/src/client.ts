/** The client: a cluster reached through its members' HTTP ports, the
 * namespace handles, capabilities, namespace listing, session keys and the
 * change feed. */

import { setTimeout as sleep } from "node:timers/promises";

import { AmbiguousMutationError, InvalidError, UnsupportedError } from "./errors.js";
import { DEFAULT_OPTIONS, HttpCluster, type Options } from "./http.js";
import { Kv, Session } from "./kv.js";
import { changeFromWire, sessionToWire, type ChangeEvent, type SessionLink } from "./types.js";
import { fromWireBytes, newOpId } from "./wire.js";

const SESSION_KEYS_PAGE = 1000;

export interface ClientOptions extends Partial<Options> {
  token?: string;
  /** `kv("config")` addresses `stream:<defaultStream>/config`. */
  defaultStream?: string;
}

export type Consistency = "linearizable" | "eventual" | { at_least: string };

/** `http://host:port[,host:port…][?token=…&default_stream=…]` (or
 * `https://`): the endpoints and the options. */
export function parseConnectionString(connectionString: string): { endpoints: string[]; options: ClientOptions } {
  let text = connectionString.trim();
  let scheme = "http://";
  for (const prefix of ["http://", "https://"]) {
    if (text.startsWith(prefix)) {
      scheme = prefix;
      text = text.slice(prefix.length);
    }
  }
  const [hosts = "", query = ""] = text.split("?", 2);
  const endpoints = hosts
    .split(",")
    .map((host) => host.trim().replace(/\/+$/, ""))
    .filter((host) => host !== "")
    .map((host) => scheme + host);
  if (endpoints.length === 0) throw new InvalidError(`connection string ${connectionString} names no host:port`);
  const options: ClientOptions = {};
  for (const [name, value] of new URLSearchParams(query)) {
    if (name === "token") options.token = value;
    else if (name === "default_stream") options.defaultStream = value;
    else throw new InvalidError(`connection string option ${name} is none of token, default_stream`);
  }
  return { endpoints, options };
}

/** A handle on a cluster; close it when done (`await using` closes it). */
export class Client {
  readonly http: HttpCluster;
  private readonly defaultStream: string | undefined;
  private offered: Promise<string[]> | undefined;
  /** Lease acquisitions run one at a time per client. */
  private leaseGate: Promise<unknown> = Promise.resolve();

  constructor(endpoints: string | string[], options: ClientOptions = {}) {
    const listed = typeof endpoints === "string" ? [endpoints] : endpoints;
    this.http = new HttpCluster(listed, options.token, {
      attemptTimeoutMs: options.attemptTimeoutMs ?? DEFAULT_OPTIONS.attemptTimeoutMs,
      callTimeoutMs: options.callTimeoutMs ?? DEFAULT_OPTIONS.callTimeoutMs,
    });
    this.defaultStream = options.defaultStream;
  }

  /** A client for the members a connection string names. */
  static connect(connectionString: string, options: ClientOptions = {}): Client {
    const parsed = parseConnectionString(connectionString);
    return new Client(parsed.endpoints, { ...parsed.options, ...options });
  }

  async close(): Promise<void> {
    this.http.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private streamPrefix(): string {
    return this.defaultStream === undefined ? "" : `stream:${this.defaultStream}/`;
  }

  /** The name sent for `namespace` (stream-scoped with a default stream). */
  resourceNamespace(namespace: string): string {
    return this.streamPrefix() + namespace;
  }

  /** A handle on one namespace, scoped to the default stream if any. */
  kv(namespace: string): Kv {
    return new Kv(this, namespace, this.resourceNamespace(namespace));
  }

  /** A handle on a namespace exactly as named. */
  kvUnscoped(namespace: string): Kv {
    return new Kv(this, namespace, namespace);
  }

  /** The session `sessionId` of `stream`, for linking writes to it. */
  session(stream: string, sessionId: string): Session {
    return new Session(this, { stream, sessionId });
  }

  /** What the cluster offers (`kv`, `cas`, `fenced_leases`, …); asked once. */
  async capabilities(): Promise<string[]> {
    this.offered ??= this.http
      .call("GET", "/kv/v1/capabilities", undefined, undefined)
      .then((answer) => (answer as { capabilities: string[] }).capabilities.map(String));
    try {
      return [...(await this.offered)];
    } catch (error) {
      this.offered = undefined;
      throw error;
    }
  }

  /** `UnsupportedError`, before anything is sent, without `capability`. */
  async require(capability: string): Promise<void> {
    if (!(await this.capabilities()).includes(capability)) {
      throw new UnsupportedError(`the cluster does not offer ${capability}`);
    }
  }

  /** One atomic write of wire operations under `opId` (fresh when left
   * out): the answer's `op_id`, `position` and `results`. */
  async write(operations: Record<string, unknown>[], opId: string = newOpId()): Promise<WriteAnswer> {
    const body = new TextEncoder().encode(JSON.stringify({ op_id: opId, operations }));
    return (await this.http.call("POST", "/kv/v1/write", body, opId)) as WriteAnswer;
  }

  /** One wire read: its answer and `position`. */
  async read(query: Record<string, unknown>, consistency: Consistency = "linearizable"): Promise<Record<string, unknown>> {
    const body = new TextEncoder().encode(JSON.stringify({ query, consistency }));
    return (await this.http.call("POST", "/kv/v1/read", body, undefined)) as Record<string, unknown>;
  }

  /** A lease acquisition behind the client's gate; an unknown outcome
   * waits out `ttlMs` before it is reported, and the gate stays closed
   * through the wait even if the caller stopped waiting. */
  acquireGated(operation: Record<string, unknown>, ttlMs: number): Promise<WriteAnswer> {
    const acquisition = this.leaseGate.then(async () => {
      try {
        return await this.write([operation]);
      } catch (error) {
        if (!(error instanceof AmbiguousMutationError)) throw error;
        await sleep(ttlMs);
        throw new AmbiguousMutationError(`${error.message}; any grant it made has expired after its TTL of ${ttlMs} ms`, {
          kind: "waitOutLeaseTtl",
          ttlMicros: BigInt(ttlMs) * 1000n,
        });
      }
    });
    this.leaseGate = acquisition.catch(() => undefined);
    return acquisition;
  }

  /** The namespaces holding live entries (this stream's, unprefixed). */
  async kvNamespaces(): Promise<string[]> {
    await this.require("kv");
    const prefix = this.streamPrefix();
    const answer = await this.read({ op: "namespaces", prefix });
    return (answer.namespaces as string[]).filter((name) => name.startsWith(prefix)).map((name) => name.slice(prefix.length));
  }

  /** The (namespace, key) pairs written under `session`, every page. */
  async sessionKeys(session: SessionLink): Promise<[string, Uint8Array][]> {
    await this.require("kv");
    const written: [string, Uint8Array][] = [];
    let after: unknown = null;
    for (;;) {
      const query: Record<string, unknown> = { op: "session_keys", session: sessionToWire(session), limit: SESSION_KEYS_PAGE };
      if (after !== null) query.after = after;
      const answer = await this.read(query);
      for (const key of answer.keys as { namespace: string; key: unknown }[]) {
        written.push([String(key.namespace), fromWireBytes(key.key)]);
      }
      after = answer.resume_after;
      if (after === null) return written;
    }
  }

  /** Every change after `after` (log index, sequence), in commit order, at
   * least once, resumed on another member when a connection fails; a
   * position older than the cluster keeps throws `compacted`. */
  async *changes(after: [bigint, number] = [0n, 0], namespacePrefix = ""): AsyncGenerator<ChangeEvent> {
    const path = `/kv/v1/changes?${new URLSearchParams({ namespace_prefix: namespacePrefix })}`;
    for await (const event of this.http.events(path, after)) {
      yield changeFromWire(JSON.parse(event.data));
    }
  }
}

export interface WriteAnswer {
  op_id: string;
  position: string;
  results: Record<string, unknown>[];
}
