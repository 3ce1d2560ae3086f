/**
 * State stores: the small get/set/delete interface agents use for
 * checkpoints, cursor offsets and duplicate-suppression keys. Keys are
 * strings, values are bytes.
 *
 * - `InMemoryStore` lives in the process and is gone on restart;
 * - `FileStore(root)` keeps one file per key (named `k` + the key's UTF-8
 *   bytes in hex, as the Rust and Python SDKs name them) and survives
 *   restarts: a value is written to a temporary file, fsynced, renamed over
 *   the old one and the directory fsynced;
 * - `new KvStore(kv)` is the managed store: set never expires.
 */

import { randomBytes } from "node:crypto";
import { mkdir, open, readFile, rename, unlink } from "node:fs/promises";
import { join } from "node:path";

import { KvExecutionError } from "./errors.js";
import type { Kv } from "./kv.js";

export interface StateStore {
  get(key: string): Promise<Uint8Array | undefined>;
  set(key: string, value: Uint8Array): Promise<void>;
  /** True when a value was removed. */
  delete(key: string): Promise<boolean>;
}

export class InMemoryStore implements StateStore {
  private readonly values = new Map<string, Uint8Array>();

  async get(key: string): Promise<Uint8Array | undefined> {
    return this.values.get(key);
  }

  async set(key: string, value: Uint8Array): Promise<void> {
    this.values.set(key, Uint8Array.from(value));
  }

  async delete(key: string): Promise<boolean> {
    return this.values.delete(key);
  }
}

function isMissingFile(error: unknown): boolean {
  return (error as { code?: unknown }).code === "ENOENT";
}

export class FileStore implements StateStore {
  constructor(private readonly root: string) {}

  private path(key: string): string {
    return join(this.root, `k${Buffer.from(key, "utf8").toString("hex")}`);
  }

  private async syncRoot(): Promise<void> {
    const directory = await open(this.root, "r");
    try {
      await directory.sync();
    } finally {
      await directory.close();
    }
  }

  private async io<T>(action: string, work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (error) {
      throw new KvExecutionError(`${action} under ${this.root}: ${String(error)}`, { kind: "unavailable" });
    }
  }

  async get(key: string): Promise<Uint8Array | undefined> {
    return this.io("reading", async () => {
      try {
        return new Uint8Array(await readFile(this.path(key)));
      } catch (error) {
        if (isMissingFile(error)) return undefined;
        throw error;
      }
    });
  }

  async set(key: string, value: Uint8Array): Promise<void> {
    await this.io("writing", async () => {
      await mkdir(this.root, { recursive: true });
      const path = this.path(key);
      const temporary = `${path}.${randomBytes(16).toString("hex")}.tmp`;
      const file = await open(temporary, "w");
      try {
        await file.writeFile(value);
        await file.sync();
      } finally {
        await file.close();
      }
      await rename(temporary, path);
      await this.syncRoot();
    });
  }

  async delete(key: string): Promise<boolean> {
    return this.io("deleting", async () => {
      try {
        await unlink(this.path(key));
      } catch (error) {
        if (isMissingFile(error)) return false;
        throw error;
      }
      await this.syncRoot();
      return true;
    });
  }
}

/** A namespace as a state store: set never expires. */
export class KvStore implements StateStore {
  constructor(private readonly kv: Kv) {}

  async get(key: string): Promise<Uint8Array | undefined> {
    return this.kv.get(new TextEncoder().encode(key));
  }

  async set(key: string, value: Uint8Array): Promise<void> {
    await this.kv.set(new TextEncoder().encode(key)).bytes(value).send();
  }

  async delete(key: string): Promise<boolean> {
    return this.kv.delete(new TextEncoder().encode(key));
  }
}
