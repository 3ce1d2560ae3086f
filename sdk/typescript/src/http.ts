/**
 * The HTTP ports of a cluster's members, as one endpoint with retries,
 * over Node's `fetch`.
 *
 * Any member serves the KV API (writes and linearizable reads follow the
 * leader from there). A call goes to the member that answered last; one
 * that cannot be reached, or answers `unavailable`, is passed over for the
 * next, with backoff (20 ms doubling to 500 ms) until the call's time is
 * up. A mutation carries its op id on every attempt, so sending it again
 * after a lost answer applies it at most once; if no attempt settles it,
 * the call ends with `AmbiguousMutationError` and the op id to retry with.
 */

import { setTimeout as sleep } from "node:timers/promises";

import { AmbiguousMutationError, InvalidError, KvExecutionError, LodeError, errorFromWire } from "./errors.js";

const BACKOFF_INITIAL_MS = 20;
const BACKOFF_MAX_MS = 500;
/** A change stream that heard nothing (not even the server's keepalive,
 * every 15 s) for this long is dead. */
const STREAM_SILENCE_MS_MAX = 45_000;
/** Dial failures: the request cannot have reached the member. */
const NOT_SENT = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "UND_ERR_CONNECT_TIMEOUT"]);

export interface Options {
  /** One attempt against one member, in milliseconds. */
  attemptTimeoutMs: number;
  /** All attempts of one call together, in milliseconds. */
  callTimeoutMs: number;
}

export const DEFAULT_OPTIONS: Options = { attemptTimeoutMs: 10_000, callTimeoutMs: 30_000 };

export function normalizeEndpoint(endpoint: string): string {
  let trimmed = endpoint.trim().replace(/\/+$/, "");
  if (trimmed === "") throw new InvalidError("an endpoint must name host:port");
  if (!trimmed.includes("://")) trimmed = `http://${trimmed}`;
  if (!/^https?:\/\//.test(trimmed)) throw new InvalidError(`endpoint ${trimmed} is neither http:// nor https://`);
  return trimmed;
}

/** A failure after the request may have reached the member. */
class Uncertain extends Error {}
/** A failure before the request could reach the member. */
class NotSent extends Error {}

function causeCode(error: unknown): string | undefined {
  const cause = (error as { cause?: { code?: unknown } }).cause;
  return typeof cause?.code === "string" ? cause.code : undefined;
}

export class HttpCluster {
  private readonly endpoints: string[];
  private preferred = 0;
  private closed = false;
  private readonly inFlight = new Set<AbortController>();

  constructor(endpoints: string[], private readonly token: string | undefined, readonly options: Options) {
    if (!(options.attemptTimeoutMs > 0) || !(options.callTimeoutMs > 0)) {
      throw new InvalidError("attemptTimeoutMs and callTimeoutMs must be above zero");
    }
    if (endpoints.length === 0) throw new InvalidError("endpoints must name at least one host:port");
    this.endpoints = endpoints.map(normalizeEndpoint);
  }

  headers(): Record<string, string> {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (this.token !== undefined) headers.authorization = `Bearer ${this.token}`;
    return headers;
  }

  /** Stops every request in flight; the next call starts afresh. */
  reset(): void {
    for (const controller of this.inFlight) controller.abort(new Error("the transport was reset"));
    this.inFlight.clear();
  }

  close(): void {
    this.reset();
    this.closed = true;
  }

  private rotate(index: number): void {
    if (this.preferred === index) this.preferred = (index + 1) % this.endpoints.length;
  }

  /** One request to the preferred member: its JSON answer, or the error it
   * stands for. */
  private async attempt(method: string, path: string, body: Uint8Array | undefined, timeoutMs: number): Promise<unknown> {
    if (this.closed) throw new InvalidError("the client is closed");
    const url = this.endpoints[this.preferred] + path;
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    this.inFlight.add(controller);
    try {
      let response: Response;
      try {
        response = await fetch(url, { method, headers: this.headers(), body, signal: controller.signal });
      } catch (error) {
        const code = causeCode(error);
        if (code !== undefined && NOT_SENT.has(code)) throw new NotSent(`${code} dialing ${url}`);
        throw new Uncertain(`${code ?? String(error)} at ${url}`);
      }
      let text: string;
      try {
        text = await response.text();
      } catch (error) {
        throw new Uncertain(`${causeCode(error) ?? String(error)} reading the answer at ${url}`);
      }
      let answer: unknown;
      try {
        answer = JSON.parse(text);
      } catch {
        // Answers without JSON come from in front of the API.
        if (response.status === 413) return new InvalidError(`the request body is over the member's limit (HTTP 413 at ${url})`);
        if (response.status === 401) return new KvExecutionError(`unauthorized: ${text.trim()}`, { kind: "unauthorized" });
        throw new Uncertain(`HTTP ${response.status} without JSON at ${url}`);
      }
      return response.status === 200 ? answer : errorFromWire(answer, response.status);
    } finally {
      clearTimeout(timer);
      this.inFlight.delete(controller);
    }
  }

  /** The answer of one call, with retries; `opId` marks a mutation. */
  async call(method: string, path: string, body: Uint8Array | undefined, opId: string | undefined, timeoutMs?: number): Promise<unknown> {
    const callTimeoutMs = timeoutMs ?? this.options.callTimeoutMs;
    const attemptTimeoutMs = timeoutMs ?? this.options.attemptTimeoutMs;
    const deadline = Date.now() + callTimeoutMs;
    let backoff = BACKOFF_INITIAL_MS;
    let uncertain: string | undefined;
    // Made only when needed: an Error captures its stack when constructed.
    let last: LodeError | undefined;
    for (;;) {
      const index = this.preferred;
      const remaining = Math.max(deadline - Date.now(), 1);
      try {
        const answer = await this.attempt(method, path, body, Math.min(attemptTimeoutMs, remaining));
        if (!(answer instanceof LodeError)) return answer;
        if (answer instanceof AmbiguousMutationError && opId !== undefined) {
          uncertain = answer.message;
          last = new KvExecutionError(answer.message, { kind: "unavailable" });
          this.rotate(index);
        } else if (answer.detail.kind === "unavailable") {
          last = answer;
          this.rotate(index);
        } else {
          throw answer;
        }
      } catch (error) {
        if (error instanceof NotSent) {
          last = new KvExecutionError(error.message, { kind: "unavailable" });
        } else if (error instanceof Uncertain) {
          uncertain = error.message;
          last = new KvExecutionError(error.message, { kind: opId === undefined ? "timeout" : "unavailable" });
        } else {
          throw error;
        }
        this.rotate(index);
      }
      if (Date.now() >= deadline) {
        if (opId !== undefined && uncertain !== undefined) {
          throw new AmbiguousMutationError(
            `the outcome is unknown: ${uncertain}; to recover, send the same mutation again with op id ${opId}`,
            { kind: "retrySameOperation", opId },
          );
        }
        throw last ?? new KvExecutionError("no member answered", { kind: "unavailable" });
      }
      await sleep(Math.min(backoff, Math.max(deadline - Date.now(), 0)));
      backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
    }
  }

  /** A server-sent-event stream's events, resumed after the last id on
   * another member when a connection fails; ends with an error event
   * (thrown) or once every member stayed unreachable for a call's time. */
  async *events(path: string, after: [bigint, number]): AsyncGenerator<{ id: string; event: string; data: string }> {
    let lastId = `${after[0]}.${after[1]}`;
    let backoff = BACKOFF_INITIAL_MS;
    let failingSince: number | undefined;
    for (;;) {
      if (this.closed) throw new InvalidError("the client is closed");
      const index = this.preferred;
      const controller = new AbortController();
      let silence = setTimeout(() => controller.abort(), STREAM_SILENCE_MS_MAX);
      this.inFlight.add(controller);
      try {
        const response = await fetch(this.endpoints[index] + path, {
          headers: { ...this.headers(), "last-event-id": lastId },
          signal: controller.signal,
        });
        if (response.status !== 200 || response.body === null) {
          throw errorFromWire(JSON.parse(await response.text()), response.status);
        }
        failingSince = undefined;
        backoff = BACKOFF_INITIAL_MS;
        let pending = "";
        let event = { id: "", event: "message", data: "" };
        for await (const chunk of response.body.pipeThrough(new TextDecoderStream())) {
          clearTimeout(silence);
          silence = setTimeout(() => controller.abort(), STREAM_SILENCE_MS_MAX);
          pending += chunk;
          let newline: number;
          while ((newline = pending.indexOf("\n")) >= 0) {
            const line = pending.slice(0, newline);
            pending = pending.slice(newline + 1);
            if (line.startsWith("id: ")) event.id = line.slice(4);
            else if (line.startsWith("event: ")) event.event = line.slice(7);
            else if (line.startsWith("data: ")) event.data = line.slice(6);
            else if (line === "" && event.data !== "") {
              if (event.event === "error") throw errorFromWire({ error: JSON.parse(event.data) }, 200);
              yield event;
              if (event.id !== "") lastId = event.id;
              event = { id: "", event: "message", data: "" };
            }
          }
        }
        // The member ended the stream (it is shutting down): resume elsewhere.
        this.rotate(index);
        await sleep(BACKOFF_INITIAL_MS);
      } catch (error) {
        if (error instanceof LodeError) throw error;
        const now = Date.now();
        failingSince ??= now;
        if (now - failingSince > this.options.callTimeoutMs) {
          throw new KvExecutionError(`the change stream failed: ${String(error)}`, { kind: "unavailable" });
        }
        this.rotate(index);
        await sleep(backoff);
        backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
      } finally {
        clearTimeout(silence);
        this.inFlight.delete(controller);
        controller.abort();
      }
    }
  }
}
