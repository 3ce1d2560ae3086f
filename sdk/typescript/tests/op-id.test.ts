/** Op ids: the millisecond they were made in their first 12 hexadecimal
 * digits, then 80 random bits, never repeated. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { newOpId } from "../src/wire.js";

test("op ids begin with the millisecond they were made and never repeat", () => {
  const before = Date.now();
  const ids = Array.from({ length: 10_000 }, () => newOpId());
  const after = Date.now();
  for (const id of ids) {
    assert.match(id, /^[0-9a-f]{32}$/);
    const millis = parseInt(id.slice(0, 12), 16);
    assert.ok(millis >= before && millis <= after, id);
  }
  assert.equal(new Set(ids).size, ids.length);
  let later = newOpId();
  while (parseInt(later.slice(0, 12), 16) <= after) later = newOpId();
  assert.ok(ids.every((id) => id < later), "ids of a later millisecond sort after");
});
