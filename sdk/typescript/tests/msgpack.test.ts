/** MessagePack as the seed gives it: shortest integer encodings, bigints
 * outside the 64-bit ranges refused, 64-bit integers decoded as bigint,
 * named maps, and malformed input refused. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { InvalidError, decodeMsgpack, encodeMsgpack } from "../src/index.js";

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString("hex");

test("integers take their shortest encoding, numbers and bigints alike", () => {
  const cases: [number | bigint, string][] = [
    [0, "00"], [127, "7f"], [128, "cc80"], [255, "ccff"], [256, "cd0100"], [65_536, "ce00010000"],
    [2 ** 32, "cf0000000100000000"], [-1, "ff"], [-32, "e0"], [-33, "d0df"], [-129, "d1ff7f"],
    [-32_769, "d2ffff7fff"], [-(2 ** 31) - 1, "d3ffffffff7fffffff"],
    [5n, "05"], [300n, "cd012c"], [(1n << 64n) - 1n, "cfffffffffffffffff"], [-(1n << 63n), "d38000000000000000"],
  ];
  for (const [value, expected] of cases) assert.equal(hex(encodeMsgpack(value)), expected, String(value));
  assert.throws(() => encodeMsgpack(1n << 64n), InvalidError);
  assert.throws(() => encodeMsgpack(-(1n << 63n) - 1n), InvalidError);
  assert.equal(hex(encodeMsgpack(1.5)), "cb3ff8000000000000");
});

test("small integers decode as numbers and 64-bit ones as bigint", () => {
  assert.equal(decodeMsgpack(encodeMsgpack(4_000_000_000)), 4_000_000_000);
  assert.equal(decodeMsgpack(encodeMsgpack(2 ** 40)), 2n ** 40n);
  assert.equal(decodeMsgpack(encodeMsgpack(-(2 ** 40))), -(2n ** 40n));
  assert.equal(decodeMsgpack(Uint8Array.from([0xcf, 0, 0, 0, 0, 0, 0, 0, 1])), 1n, "uint64 is bigint even when small");
});

test("structured values are named maps and round-trip", () => {
  const value = { name: "Ada", tags: ["a", "b"], nested: { ok: true, none: null }, bytes: Uint8Array.from([1, 2]), long: "x".repeat(40) };
  assert.equal(hex(encodeMsgpack({ a: 1 })), "81a16101");
  assert.deepEqual(decodeMsgpack(encodeMsgpack(value)), value);
  const map = decodeMsgpack(encodeMsgpack(new Map<unknown, unknown>([[1, "one"]])));
  assert.deepEqual(map, new Map([[1, "one"]]), "non-string keys stay a Map");
  const hostile = decodeMsgpack(Uint8Array.from([0x81, 0xa9, ...new TextEncoder().encode("__proto__"), 0x01])) as object;
  assert.equal(Object.getPrototypeOf(hostile), Object.prototype, "a __proto__ key is a field, not a prototype");
  assert.equal(Object.getOwnPropertyDescriptor(hostile, "__proto__")?.value, 1);
  assert.throws(() => encodeMsgpack(new Date()), InvalidError);
});

test("malformed input is refused", () => {
  for (const bad of [[0xcd, 0x01], [0xc1], [0x01, 0x02], [0xd4, 0, 0], new Array(200).fill(0x91)]) {
    assert.throws(() => decodeMsgpack(Uint8Array.from(bad)), InvalidError, JSON.stringify(bad));
  }
});
