/**
 * Lode's one error kind set as TypeScript errors. Store failures are
 * `KvExecutionError`s whose `detail.kind` names the failure (camelCase:
 * `versionConflict`, `leaseLost`, `stale`, `notFound`, …); a request refused
 * before it was sent is `InvalidError` or `UnsupportedError`; a mutation
 * whose outcome is unknown is `AmbiguousMutationError`, whose
 * `ambiguousRecovery` says what to do.
 */

/** What to do after a mutation whose outcome is unknown. */
export type AmbiguousRecovery =
  | { kind: "repeatPrepared" }
  | { kind: "retrySameOperation"; opId: string }
  | { kind: "waitOutLeaseTtl"; ttlMicros: bigint };

/** The kinds of failure, as `detail.kind` spells them. */
export type ErrorKind =
  | "invalid"
  | "notFound"
  | "versionConflict"
  | "leaseLost"
  | "stale"
  | "unsupported"
  | "ambiguousMutation"
  | "unauthorized"
  | "forbidden"
  | "unavailable"
  | "timeout"
  | "compacted"
  | "quotaExceeded";

/** What a failure carries beside its kind. */
export interface ErrorDetail {
  kind: ErrorKind;
  /** A version conflict's current version (null: the key is absent). */
  currentVersion?: bigint | null;
  /** Failed checks of an atomic write, by their place among its checks. */
  failedChecks?: number[];
  /** Anything else the server said, as it said it. */
  wire?: Record<string, unknown>;
}

/** Every failure a Lode API reports. */
export class LodeError extends Error {
  readonly detail: ErrorDetail;

  constructor(message: string, detail: ErrorDetail) {
    super(message);
    this.name = new.target.name;
    this.detail = detail;
  }
}

/** A store failure: not found, version conflict, lease lost, stale, … */
export class KvExecutionError extends LodeError {}

/** A request broke a limit or was malformed. */
export class InvalidError extends LodeError {
  constructor(message: string) {
    super(message, { kind: "invalid" });
  }
}

/** The cluster lacks a capability the call needs; nothing was sent. */
export class UnsupportedError extends LodeError {
  constructor(message: string) {
    super(message, { kind: "unsupported" });
  }
}

/** The mutation may or may not have been applied. */
export class AmbiguousMutationError extends LodeError {
  readonly ambiguousRecovery: AmbiguousRecovery;

  constructor(message: string, recovery: AmbiguousRecovery) {
    super(message, { kind: "ambiguousMutation" });
    this.ambiguousRecovery = recovery;
  }
}

function kindOf(error: unknown): ErrorKind | undefined {
  return error instanceof LodeError ? error.detail.kind : undefined;
}

export function isVersionConflict(error: unknown): boolean {
  return error instanceof KvExecutionError && error.detail.kind === "versionConflict";
}

export function isLeaseLost(error: unknown): boolean {
  return error instanceof KvExecutionError && error.detail.kind === "leaseLost";
}

export function isStale(error: unknown): boolean {
  return kindOf(error) === "stale";
}

export function isNotFound(error: unknown): boolean {
  return kindOf(error) === "notFound";
}

export function isAmbiguousMutation(error: unknown): error is AmbiguousMutationError {
  return error instanceof AmbiguousMutationError;
}

const WIRE_KINDS: Record<string, ErrorKind> = {
  invalid: "invalid",
  not_found: "notFound",
  version_conflict: "versionConflict",
  lease_lost: "leaseLost",
  stale: "stale",
  unsupported: "unsupported",
  ambiguous_mutation: "ambiguousMutation",
  unauthorized: "unauthorized",
  forbidden: "forbidden",
  unavailable: "unavailable",
  timeout: "timeout",
  compacted: "compacted",
  quota_exceeded: "quotaExceeded",
};

function recoveryFromWire(recovery: unknown): AmbiguousRecovery {
  if (typeof recovery === "object" && recovery !== null) {
    const fields = recovery as Record<string, unknown>;
    if (fields.action === "retry_same_operation" && typeof fields.op_id === "string") {
      return { kind: "retrySameOperation", opId: fields.op_id };
    }
    if (fields.action === "wait_out_lease_ttl" && typeof fields.ttl_micros === "string") {
      return { kind: "waitOutLeaseTtl", ttlMicros: BigInt(fields.ttl_micros) };
    }
  }
  return { kind: "repeatPrepared" };
}

/** The error for a failure answer (`{"error": {"kind", "message", …}}`). */
export function errorFromWire(body: unknown, status: number): LodeError {
  const error =
    typeof body === "object" && body !== null ? (body as Record<string, unknown>).error : undefined;
  if (typeof error !== "object" || error === null) {
    return new KvExecutionError(`the server answered HTTP ${status} without an error kind`, { kind: "unavailable" });
  }
  const fields = error as Record<string, unknown>;
  const kind = WIRE_KINDS[String(fields.kind)] ?? "unavailable";
  const message = String(fields.message ?? fields.kind);
  if (kind === "invalid") return new InvalidError(message);
  if (kind === "unsupported") return new UnsupportedError(message);
  if (kind === "ambiguousMutation") return new AmbiguousMutationError(message, recoveryFromWire(fields.recovery));
  const detail: ErrorDetail = { kind, wire: fields };
  if ("current_version" in fields) {
    detail.currentVersion = typeof fields.current_version === "string" ? BigInt(fields.current_version) : null;
  }
  if (Array.isArray(fields.failed_checks)) detail.failedChecks = fields.failed_checks.map(Number);
  return new KvExecutionError(message, detail);
}
