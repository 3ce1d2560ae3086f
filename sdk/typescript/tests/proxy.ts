/** A TCP proxy in front of one member's HTTP port that can cut
 * connections mid-request: while `cutting`, each connection is closed as
 * soon as the member's answer starts, so the request arrived and was acted
 * on but its answer never reaches the client. */

import { connect, createServer, type Server, type Socket } from "node:net";

export class CuttingProxy {
  cutting = false;
  cut = 0;
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();

  constructor(private readonly upstream: string) {}

  async start(): Promise<string> {
    const [host, port] = this.upstream.split(":");
    this.server = createServer((client) => {
      const member = connect(Number(port), host);
      this.sockets.add(client).add(member);
      client.on("data", (chunk) => member.write(chunk));
      member.on("data", (chunk) => {
        if (this.cutting) {
          this.cut += 1;
          client.destroy();
          member.destroy();
        } else {
          client.write(chunk);
        }
      });
      for (const [from, to] of [[client, member], [member, client]] as const) {
        from.on("close", () => to.destroy());
        from.on("error", () => to.destroy());
      }
    });
    await new Promise<void>((resolve) => this.server!.listen(0, "127.0.0.1", resolve));
    const address = this.server.address();
    return `127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`;
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise((resolve) => this.server?.close(resolve));
  }
}
