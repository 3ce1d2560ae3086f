/** Value codecs: JSON, MessagePack, and the `Codec` any application codec
 * follows (its `encoding` is stored with the entry: `json`, `msgpack`, or
 * `custom:<name>`). */

import { InvalidError } from "./errors.js";
import { decodeMsgpack, encodeMsgpack } from "./msgpack.js";

export interface Codec<T = unknown> {
  readonly encoding: string;
  encode(value: T): Uint8Array;
  decode(data: Uint8Array): T;
}

export const jsonCodec: Codec = {
  encoding: "json",
  encode(value: unknown): Uint8Array {
    let text: string | undefined;
    try {
      text = JSON.stringify(value);
    } catch (error) {
      throw new InvalidError(`the value cannot be encoded as JSON: ${String(error)}`);
    }
    if (text === undefined) throw new InvalidError("the value cannot be encoded as JSON");
    return new TextEncoder().encode(text);
  },
  decode(data: Uint8Array): unknown {
    try {
      return JSON.parse(new TextDecoder().decode(data));
    } catch (error) {
      throw new InvalidError(`the value is not JSON: ${String(error)}`);
    }
  },
};

export const msgpackCodec: Codec = {
  encoding: "msgpack",
  encode: encodeMsgpack,
  decode: decodeMsgpack,
};
