/**
 * MessagePack as the KV seed gives it for TypeScript: structured values as
 * named maps, the shortest integer encoding for every number and bigint, a
 * bigint outside the signed and unsigned 64-bit ranges refused, and values
 * encoded as 64-bit integers decoded as bigint (smaller ones as numbers).
 */

import { InvalidError } from "./errors.js";

const INT64_MIN = -(1n << 63n);
const UINT64_MAX = (1n << 64n) - 1n;
/** How deep a decoded value may nest. */
const DEPTH_MAX = 100;

class Writer {
  private bytes: number[] = [];

  byte(value: number): void {
    this.bytes.push(value & 0xff);
  }

  big(value: bigint, size: number): void {
    for (let shift = BigInt((size - 1) * 8); shift >= 0n; shift -= 8n) {
      this.byte(Number((value >> shift) & 0xffn));
    }
  }

  raw(data: Uint8Array): void {
    for (const byte of data) this.bytes.push(byte);
  }

  finish(): Uint8Array {
    return Uint8Array.from(this.bytes);
  }
}

function writeInteger(writer: Writer, value: bigint): void {
  if (value < INT64_MIN || value > UINT64_MAX) {
    throw new InvalidError(`the bigint ${value} is outside the signed and unsigned 64-bit ranges MessagePack holds`);
  }
  if (value >= 0n) {
    if (value <= 0x7fn) return writer.byte(Number(value));
    if (value <= 0xffn) return (writer.byte(0xcc), writer.big(value, 1));
    if (value <= 0xffffn) return (writer.byte(0xcd), writer.big(value, 2));
    if (value <= 0xffffffffn) return (writer.byte(0xce), writer.big(value, 4));
    return (writer.byte(0xcf), writer.big(value, 8));
  }
  const unsigned = (bits: number): bigint => value + (1n << BigInt(bits));
  if (value >= -32n) return writer.byte(Number(unsigned(8)));
  if (value >= -0x80n) return (writer.byte(0xd0), writer.big(unsigned(8), 1));
  if (value >= -0x8000n) return (writer.byte(0xd1), writer.big(unsigned(16), 2));
  if (value >= -0x80000000n) return (writer.byte(0xd2), writer.big(unsigned(32), 4));
  return (writer.byte(0xd3), writer.big(unsigned(64), 8));
}

function writeLength(writer: Writer, length: number, fix: [number, number] | null, codes: [number, number, number]): void {
  if (fix !== null && length < fix[1]) return writer.byte(fix[0] | length);
  if (codes[0] !== 0 && length <= 0xff) return (writer.byte(codes[0]), writer.big(BigInt(length), 1));
  if (length <= 0xffff) return (writer.byte(codes[1]), writer.big(BigInt(length), 2));
  return (writer.byte(codes[2]), writer.big(BigInt(length), 4));
}

function write(writer: Writer, value: unknown): void {
  if (value === null || value === undefined) return writer.byte(0xc0);
  if (value === false) return writer.byte(0xc2);
  if (value === true) return writer.byte(0xc3);
  if (typeof value === "bigint") return writeInteger(writer, value);
  if (typeof value === "number") {
    if (Number.isSafeInteger(value)) return writeInteger(writer, BigInt(value));
    writer.byte(0xcb);
    const view = new DataView(new ArrayBuffer(8));
    view.setFloat64(0, value);
    return writer.raw(new Uint8Array(view.buffer));
  }
  if (typeof value === "string") {
    const data = new TextEncoder().encode(value);
    writeLength(writer, data.length, [0xa0, 32], [0xd9, 0xda, 0xdb]);
    return writer.raw(data);
  }
  if (value instanceof Uint8Array) {
    writeLength(writer, value.length, null, [0xc4, 0xc5, 0xc6]);
    return writer.raw(value);
  }
  if (Array.isArray(value)) {
    writeLength(writer, value.length, [0x90, 16], [0, 0xdc, 0xdd]);
    for (const item of value) write(writer, item);
    return;
  }
  if (value instanceof Map) {
    writeLength(writer, value.size, [0x80, 16], [0, 0xde, 0xdf]);
    for (const [key, item] of value) {
      write(writer, key);
      write(writer, item);
    }
    return;
  }
  if (typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype) {
    const fields = Object.entries(value).filter(([, item]) => item !== undefined);
    writeLength(writer, fields.length, [0x80, 16], [0, 0xde, 0xdf]);
    for (const [key, item] of fields) {
      write(writer, key);
      write(writer, item);
    }
    return;
  }
  throw new InvalidError(`MessagePack cannot encode a ${typeof value === "object" ? value.constructor.name : typeof value}`);
}

/** The value as MessagePack. */
export function encodeMsgpack(value: unknown): Uint8Array {
  const writer = new Writer();
  write(writer, value);
  return writer.finish();
}

class Reader {
  private at = 0;
  private readonly view: DataView;

  constructor(private readonly data: Uint8Array) {
    this.view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  }

  take(count: number): number {
    if (this.at + count > this.data.length) throw new InvalidError("the value is not MessagePack: it ends early");
    const start = this.at;
    this.at += count;
    return start;
  }

  uint(size: 1 | 2 | 4): number {
    const at = this.take(size);
    return size === 1 ? this.view.getUint8(at) : size === 2 ? this.view.getUint16(at) : this.view.getUint32(at);
  }

  int(size: 1 | 2 | 4): number {
    const at = this.take(size);
    return size === 1 ? this.view.getInt8(at) : size === 2 ? this.view.getInt16(at) : this.view.getInt32(at);
  }

  bytes(count: number): Uint8Array {
    const at = this.take(count);
    return this.data.slice(at, at + count);
  }

  done(): boolean {
    return this.at === this.data.length;
  }

  read(depth: number): unknown {
    if (depth > DEPTH_MAX) throw new InvalidError(`the value is not MessagePack this SDK reads: nested over ${DEPTH_MAX} deep`);
    const code = this.uint(1);
    if (code <= 0x7f) return code;
    if (code >= 0xe0) return code - 0x100;
    if ((code & 0xe0) === 0xa0) return new TextDecoder().decode(this.bytes(code & 0x1f));
    if ((code & 0xf0) === 0x90) return this.array(code & 0x0f, depth);
    if ((code & 0xf0) === 0x80) return this.map(code & 0x0f, depth);
    switch (code) {
      case 0xc0: return null;
      case 0xc2: return false;
      case 0xc3: return true;
      case 0xc4: return this.bytes(this.uint(1));
      case 0xc5: return this.bytes(this.uint(2));
      case 0xc6: return this.bytes(this.uint(4));
      case 0xca: return this.view.getFloat32(this.take(4));
      case 0xcb: return this.view.getFloat64(this.take(8));
      case 0xcc: return this.uint(1);
      case 0xcd: return this.uint(2);
      case 0xce: return this.uint(4);
      case 0xcf: return this.view.getBigUint64(this.take(8));
      case 0xd0: return this.int(1);
      case 0xd1: return this.int(2);
      case 0xd2: return this.int(4);
      case 0xd3: return this.view.getBigInt64(this.take(8));
      case 0xd9: return new TextDecoder().decode(this.bytes(this.uint(1)));
      case 0xda: return new TextDecoder().decode(this.bytes(this.uint(2)));
      case 0xdb: return new TextDecoder().decode(this.bytes(this.uint(4)));
      case 0xdc: return this.array(this.uint(2), depth);
      case 0xdd: return this.array(this.uint(4), depth);
      case 0xde: return this.map(this.uint(2), depth);
      case 0xdf: return this.map(this.uint(4), depth);
      default:
        throw new InvalidError(`the value is not MessagePack this SDK reads: type byte 0x${code.toString(16)}`);
    }
  }

  private array(length: number, depth: number): unknown[] {
    const items: unknown[] = [];
    for (let index = 0; index < length; index++) items.push(this.read(depth + 1));
    return items;
  }

  /** A map with string keys as an object, any other as a Map. */
  private map(length: number, depth: number): Record<string, unknown> | Map<unknown, unknown> {
    const entries: [unknown, unknown][] = [];
    for (let index = 0; index < length; index++) entries.push([this.read(depth + 1), this.read(depth + 1)]);
    if (entries.every(([key]) => typeof key === "string")) {
      const object: Record<string, unknown> = {};
      for (const [key, item] of entries) {
        Object.defineProperty(object, key as string, { value: item, enumerable: true, writable: true, configurable: true });
      }
      return object;
    }
    return new Map(entries);
  }
}

/** The value MessagePack bytes hold; trailing bytes are refused. */
export function decodeMsgpack(data: Uint8Array): unknown {
  const reader = new Reader(data);
  const value = reader.read(0);
  if (!reader.done()) throw new InvalidError("the value is not MessagePack: bytes follow the value");
  return value;
}
