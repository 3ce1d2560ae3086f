/**
 * A cluster of real `lode node` processes on loopback, started from the
 * built binary (`LODE_BINARY`), each with an HTTP port; SIGKILLed by the
 * test that started it. Every wait polls a condition with a deadline.
 */

import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, openSync, closeSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

export const ACCESS_TOKEN = "test-token";
const WAIT_MS_MAX = 60_000;
const handedOut = new Set<number>();

/** A free loopback port this process never handed out before. */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = await new Promise<number>((resolve, reject) => {
      const server = createServer();
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => {
        const address = server.address();
        server.close(() => resolve(typeof address === "object" && address !== null ? address.port : 0));
      });
    });
    if (!handedOut.has(port)) {
      handedOut.add(port);
      return port;
    }
  }
}

export function binary(): string {
  const path = process.env.LODE_BINARY;
  if (!path) throw new Error("set LODE_BINARY to the built lode binary");
  return path;
}

export async function waitUntil<T>(what: string, condition: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + WAIT_MS_MAX;
  for (;;) {
    const result = await condition().catch(() => undefined);
    if (result !== undefined) return result;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

interface Member {
  id: number;
  client: string;
  peer: string;
  http: string;
  dataDir: string;
  logPath: string;
  process?: ChildProcess;
}

export class Cluster {
  readonly members = new Map<number, Member>();
  private directory = "";
  private peers = "";

  static async start(count = 3): Promise<Cluster> {
    const cluster = new Cluster();
    cluster.directory = mkdtempSync(join(tmpdir(), "lode-typescript-"));
    for (let id = 1; id <= count; id++) {
      cluster.members.set(id, {
        id,
        client: `127.0.0.1:${await freePort()}`,
        peer: `127.0.0.1:${await freePort()}`,
        http: `127.0.0.1:${await freePort()}`,
        dataDir: join(cluster.directory, `node-${id}`),
        logPath: join(cluster.directory, `node-${id}.log`),
      });
    }
    cluster.peers = [...cluster.members.values()].map((member) => `${member.id}=${member.peer}`).join(",");
    for (const member of cluster.members.values()) cluster.spawn(member);
    await cluster.waitReady();
    return cluster;
  }

  private spawn(member: Member): void {
    const log = openSync(member.logPath, "a");
    member.process = spawn(
      binary(),
      [
        "node", "--id", String(member.id), "--listen", member.client, "--peer-listen", member.peer,
        "--data-dir", member.dataDir, "--http", member.http, "--access-token", ACCESS_TOKEN, "--peers", this.peers,
      ],
      { stdio: ["ignore", "ignore", log], env: { ...process.env, LODE_LOG: "info,openraft=warn", NO_COLOR: "1" } },
    );
    closeSync(log);
  }

  running(): Member[] {
    return [...this.members.values()].filter((member) => member.process !== undefined && member.process.exitCode === null && member.process.signalCode === null);
  }

  connectionString(ids?: number[]): string {
    const chosen = ids === undefined ? [...this.members.values()] : ids.map((id) => this.members.get(id)!);
    return `http://${chosen.map((member) => member.http).join(",")}?token=${ACCESS_TOKEN}`;
  }

  async waitReady(): Promise<void> {
    await waitUntil("every running member to be ready", async () => {
      for (const member of this.running()) {
        const answer = await fetch(`http://${member.http}/ready`);
        await answer.text();
        if (answer.status !== 200) return undefined;
      }
      return true;
    });
    await this.leader();
  }

  /** The leader every running member agrees on. */
  async leader(): Promise<number> {
    return waitUntil("a leader", async () => {
      const endpoints = this.running().map((member) => member.client).join(",");
      const status = JSON.parse(execFileSync(binary(), ["cluster", "status", "--json", "--endpoints", endpoints], { timeout: 10_000 }).toString());
      const running = new Set(this.running().map((member) => member.id));
      return running.has(status.leader) ? (status.leader as number) : undefined;
    });
  }

  async kill(id: number): Promise<void> {
    const child = this.members.get(id)?.process;
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
  }

  async stop(): Promise<void> {
    for (const id of this.members.keys()) await this.kill(id);
    rmSync(this.directory, { recursive: true, force: true });
  }
}
